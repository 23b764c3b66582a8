"""The pod-group examples in deploy/examples/pod-groups/ declare what the docs say: their pods, labelled the
way each controller labels them (JobSet, Kubeflow training operator, Job), form one complete group whose
node ranks are 0..n-1. The Indexed Job and JobSet examples also run end to end against their real controllers
(tests/e2e/operator_e2e/); the Kubeflow training operator does not run in the dev cluster."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import yaml

from paralleljob.k8s.edge.constants import SCHEDULER_NAME
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.groups.podgroups import adopting_manifest, by_group, group_state

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples" / "pod-groups"
_uid = itertools.count()


def load(name: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d["kind"] not in ("Service",))


def pod_from(template: dict[str, Any], namespace: str, extra: dict[str, str]) -> dict[str, Any]:
    """A pod as its controller makes it: the template plus the controller's index keys (labels and
    annotations both, as JobSet and the Job controller set them)."""
    meta = copy.deepcopy(template.get("metadata") or {})
    n = next(_uid)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "uid-j", "controller": True}
    return {
        "metadata": {
            "name": f"p{n}",
            "namespace": namespace,
            "uid": f"u{n}",
            "labels": {**meta.get("labels", {}), **extra},
            "annotations": {**meta.get("annotations", {}), **extra},
            "ownerReferences": [owner],
        },
        "spec": copy.deepcopy(template["spec"]),
        "status": {"phase": "Pending"},
    }


def assert_one_complete_group(pods: list[PodInfo]) -> None:
    groups = by_group(pods)
    assert len(groups) == 1, groups
    ((key, members),) = groups.items()
    namespace, name = key.split("/")
    manifest = adopting_manifest(namespace, name, members)
    manifest["metadata"].update(uid="u", resourceVersion="1")
    job = parse_job(manifest)
    assert job.request is not None, job.invalid
    state = group_state(job.request, members)
    assert state.ready, state.message
    assert sorted(state.by_rank) == list(range(len(members)))


def test_the_indexed_job_example_forms_one_group_by_completion_index() -> None:
    job = load("indexed-job.yaml")
    template = job["spec"]["template"]
    assert template["spec"]["schedulerName"] == SCHEDULER_NAME
    pods = [
        parse_pod(pod_from(template, "ns", {"batch.kubernetes.io/job-completion-index": str(i)}))
        for i in range(job["spec"]["completions"])
    ]
    assert_one_complete_group(pods)


def test_the_jobset_example_forms_one_group_by_global_job_index_and_completion_index() -> None:
    jobset = load("jobset.yaml")
    pods = []
    for replicated in jobset["spec"]["replicatedJobs"]:
        job_spec = replicated["template"]["spec"]
        for job_index in range(replicated["replicas"]):
            for completion in range(job_spec["completions"]):
                keys = {
                    "jobset.sigs.k8s.io/job-global-index": str(job_index),
                    "jobset.sigs.k8s.io/job-index": str(job_index),
                    "batch.kubernetes.io/job-completion-index": str(completion),
                }
                pods.append(parse_pod(pod_from(job_spec["template"], "ns", keys)))
    assert_one_complete_group(pods)


def test_the_pytorchjob_example_forms_one_group_master_first() -> None:
    job = load("pytorchjob.yaml")
    pods = []
    for replica_type, spec in job["spec"]["pytorchReplicaSpecs"].items():
        for index in range(spec["replicas"]):
            keys = {
                "training.kubeflow.org/replica-type": replica_type.lower(),
                "training.kubeflow.org/replica-index": str(index),
            }
            pods.append(parse_pod(pod_from(spec["template"], "ns", keys)))
    assert [p.group_rank for p in pods] == [0, 1, 2, 3]  # the Master first, then Workers 0..2
    assert_one_complete_group(pods)

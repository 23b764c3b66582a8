"""The dev cluster's kube-controller-manager does what a real cluster's does for us: the Job controller
makes an Indexed Job's pods, the garbage collector deletes what an owner leaves behind (a ParallelJob's pods
with no operator running, a Job's pods), and the namespace controller finishes deleting a namespace.

These run with no ParallelJob operator: every pod here is created by the test or by the Job controller, so
whatever disappears was removed by the controller manager.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio.client import BatchV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import (
    API_VERSION,
    GPU_RESOURCE,
    GROUP,
    JOB_LABEL,
    KIND,
    PLURAL,
    SCHEDULER_NAME,
    VERSION,
)

pytestmark = pytest.mark.e2e

T = TypeVar("T")
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s:.0f} s"
        time.sleep(0.2)


def pod_template(gpus: int = 8) -> dict[str, Any]:
    resources = {GPU_RESOURCE: str(gpus), "cpu": "1", "memory": "1Gi"}
    return {
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "restartPolicy": "Never",
            "containers": [
                {"name": "trainer", "image": "trainer:dev", "resources": {"requests": resources, "limits": resources}}
            ],
        }
    }


def indexed_job(name: str, completions: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "template": pod_template(),
        },
    }


def parallel_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "parallelism": {"tensor": 8, "pipeline": 1, "data": 2},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:dev"}]}},
        },
    }


def owned_worker(job: dict[str, Any], index: int) -> dict[str, Any]:
    """A worker pod as the operator would create it: labelled, and owned by the ParallelJob."""
    metadata = job["metadata"]
    owner = {
        "apiVersion": API_VERSION, "kind": KIND, "name": metadata["name"], "uid": metadata["uid"],
        "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{metadata['name']}-{index}",
            "labels": {JOB_LABEL: metadata["name"]},
            "ownerReferences": [owner],
        },
        **pod_template(),
    }


def pod_names(kube: KubeSession, namespace: str, selector: str) -> list[str]:
    listed = kube.run(kube.core.list_namespaced_pod(namespace, label_selector=selector))
    return sorted(pod.metadata.name for pod in listed.items)


def create_parallel_job_with_pods(kube: KubeSession, namespace: str, name: str) -> dict[str, Any]:
    """A ParallelJob and two worker pods it owns: one bound (kwok runs it), one still Pending."""
    custom: Any = CustomObjectsApi(kube.api)
    job = dict(kube.run(custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, parallel_job(name))))
    bound = kube.run(kube.core.create_namespaced_pod(namespace, owned_worker(job, 0)))
    kube.run(kube.core.create_namespaced_pod(namespace, owned_worker(job, 1)))
    assert kube.bind_pod(namespace, bound.metadata.name, bound.metadata.uid, kube.shape.node_name(5))[0] == 201
    return job


def test_deleting_a_parallel_job_garbage_collects_its_pods(kube: KubeSession, namespace: str) -> None:
    custom: Any = CustomObjectsApi(kube.api)
    create_parallel_job_with_pods(kube, namespace, "gc-me")
    selector = f"{JOB_LABEL}=gc-me"
    wait_for(
        "the bound worker Running",
        lambda: kube.run(kube.core.read_namespaced_pod("gc-me-0", namespace)).status.phase == "Running",
        20,
    )
    assert not (kube.run(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gc-me")) or {}).get(
        "status"
    ), "an operator is acting on this job, so this test would not prove garbage collection"

    started = time.monotonic()
    kube.run(custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gc-me"))
    wait_for("the garbage collector deleting gc-me's pods", lambda: not pod_names(kube, namespace, selector), 30)
    print(f"pods of a deleted ParallelJob collected in {time.monotonic() - started:.1f} s")


def test_indexed_job_makes_pods_with_completion_indexes_and_deleting_it_deletes_them(
    kube: KubeSession, namespace: str
) -> None:
    batch: Any = BatchV1Api(kube.api)
    job = kube.run(batch.create_namespaced_job(namespace, indexed_job("indexed", completions=4)))
    selector = f"batch.kubernetes.io/job-name={job.metadata.name}"

    names = wait_for("4 pods of the Indexed Job", lambda: len(pod_names(kube, namespace, selector)) == 4, 30)
    pods = kube.run(kube.core.list_namespaced_pod(namespace, label_selector=selector)).items
    indexes = sorted(int(pod.metadata.annotations[COMPLETION_INDEX]) for pod in pods)
    assert names and indexes == [0, 1, 2, 3]
    for pod in pods:
        assert pod.metadata.labels[COMPLETION_INDEX] == pod.metadata.annotations[COMPLETION_INDEX]
        assert pod.spec.scheduler_name == SCHEDULER_NAME
        # Nothing in the dev cluster schedules for paralleljob-scheduler but the operator, which is not running.
        assert pod.status.phase == "Pending" and not pod.spec.node_name
        (owner,) = pod.metadata.owner_references
        assert (owner.kind, owner.name, owner.controller) == ("Job", "indexed", True)

    # One pod bound and Running, as if placed: deleting the Job must free its GPUs too.
    first = next(pod for pod in pods if pod.metadata.annotations[COMPLETION_INDEX] == "0")
    assert kube.bind_pod(namespace, first.metadata.name, first.metadata.uid, kube.shape.node_name(6))[0] == 201
    wait_for(
        "the bound Job pod Running",
        lambda: kube.run(kube.core.read_namespaced_pod(first.metadata.name, namespace)).status.phase == "Running",
        20,
    )
    # batch/v1 Jobs default to orphaning their pods when deleted through the API; kubectl asks for Background.
    kube.run(batch.delete_namespaced_job("indexed", namespace, propagation_policy="Background"))
    wait_for("the garbage collector deleting the Job's pods", lambda: not pod_names(kube, namespace, selector), 30)


def test_deleting_a_namespace_finishes(kube: KubeSession) -> None:
    name = f"ns-deletion-{secrets.token_hex(3)}"
    kube.run(kube.core.create_namespace({"metadata": {"name": name, "labels": {"paralleljob.dev/e2e": "true"}}}))
    batch: Any = BatchV1Api(kube.api)
    try:
        create_parallel_job_with_pods(kube, name, "doomed")
        kube.run(batch.create_namespaced_job(name, indexed_job("doomed-indexed", completions=2)))
        wait_for("the Job's pods", lambda: len(pod_names(kube, name, "batch.kubernetes.io/job-name")) == 2, 30)
    finally:
        started = time.monotonic()
        kube.run(kube.core.delete_namespace(name))

    def gone() -> bool:
        try:
            kube.run(kube.core.read_namespace(name))
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    # Upstream's namespace controller waits 5 s before it starts, and longer again when pods remain.
    wait_for(f"namespace {name} deleted", gone, 60)
    print(f"namespace with running pods deleted in {time.monotonic() - started:.1f} s")

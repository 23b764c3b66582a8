"""Ranks that finish before the rest of their job: their pods may be deleted (kube-controller-manager's pod GC
deletes the oldest terminated pods once a cluster holds more than ``--terminated-pod-gc-threshold``, 12,500
by default, and a long job's early-finished ranks are among the oldest), and a finished rank must not run
again, nor stop its job from completing: a ParallelJob's own workers, and an Indexed Job's pods adopted as a
pod group (the real Job controller counts the finished index and makes no new pod for it).

The module runs on a cluster of its own with the real pod GC on, keeping a single terminated pod.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from gangapi import own_cluster
from kubernetes_asyncio.client import BatchV1Api
from pjhelpers import Jobs, wait_for
from tests.e2e.surfaces import gpu_metrics, paralleljob_cli, pod_group_job

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import COMPLETION_INDEX_KEY, POD_GROUP_LABEL

pytestmark = pytest.mark.e2e

GC_THRESHOLD = 1


@pytest.fixture(scope="module")
def dev_cluster() -> Iterator[DevCluster]:
    yield from own_cluster("podgc", pod_gc_threshold=GC_THRESHOLD)


@pytest.fixture(scope="module")
def kube(dev_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(dev_cluster.kubeconfig, dev_cluster.shape) as session:
        yield session


def finish(pjs: Jobs, pod_name: str) -> None:
    """The rank's process exits 0: kwok writes the pod Succeeded, as a kubelet would."""
    patch = {"metadata": {"annotations": {COMPLETE_AFTER_ANNOTATION: "0s"}}}
    pjs.kube.run(pjs.kube.core.patch_namespaced_pod(pod_name, pjs.namespace, patch))
    wait_for(f"pod {pod_name} Succeeded", lambda: phase(pjs, pod_name) == "Succeeded")


def phase(pjs: Jobs, pod_name: str) -> str:
    """The pod's phase, any pod of the namespace (a pod group's carry no ParallelJob label); "gone" once deleted."""
    listed = pjs.kube.run(pjs.kube.core.list_namespaced_pod(pjs.namespace, field_selector=f"metadata.name={pod_name}"))
    return str(listed.items[0].status.phase) if listed.items else "gone"


def finished_elsewhere(pjs: Jobs, node: str) -> None:
    """A newer terminated pod in the cluster (no job's): beyond the threshold, the GC deletes the oldest.
    Creation times have whole seconds and the GC breaks ties by name, so the name sorts after the rank's."""
    body = {
        "metadata": {"name": "zz-elsewhere", "annotations": {COMPLETE_AFTER_ANNOTATION: "0s"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:e2e"}],
        },
    }
    pjs.kube.run(pjs.kube.core.create_namespaced_pod(pjs.namespace, body))


def test_a_finished_rank_deleted_by_the_pod_gc_does_not_run_again(pjs: Jobs) -> None:
    pjs.create("ranks", 4, 1, 2)
    pjs.wait_phase("ranks", "Running")
    pods = pjs.live_pods("ranks")
    first, second = (p.metadata.name for p in pods)
    finish(pjs, first)
    # the operator writes down that the rank finished, so that its pod may go
    wait_for(f"{first} in status.succeededPods", lambda: first in pjs.status("ranks").get("succeededPods", {}))
    finished_elsewhere(pjs, pods[0].spec.node_name)
    # kube-controller-manager's pod GC looks every 20 s
    wait_for(f"the pod GC deleting {first}", lambda: phase(pjs, first) == "gone", timeout_s=120)
    assert pjs.status("ranks")["phase"] == "Running"
    finish(pjs, second)
    status = pjs.wait_phase("ranks", "Succeeded")
    assert status["message"] == "all 2 workers succeeded", status
    assert phase(pjs, first) == "gone", "the finished rank was created again"


def test_a_finished_rank_deleted_by_hand_does_not_run_again(pjs: Jobs) -> None:
    pjs.create("by-hand", 4, 1, 2)
    pjs.wait_phase("by-hand", "Running")
    first, second = (p.metadata.name for p in pjs.live_pods("by-hand"))
    finish(pjs, first)
    wait_for(f"{first} in status.succeededPods", lambda: first in pjs.status("by-hand").get("succeededPods", {}))
    pjs.kube.run(pjs.kube.core.delete_namespaced_pod(first, pjs.namespace, grace_period_seconds=0))
    finish(pjs, second)
    status = pjs.wait_phase("by-hand", "Succeeded")
    assert status["message"] == "all 2 workers succeeded", status
    assert first not in {p.metadata.name for p in pjs.pods("by-hand")}, "the finished rank was created again"


def allocated(pjs: Jobs) -> float | None:
    """GPUs the operator's /metrics counts allocated (``paralleljob_gpus{state="allocated"}``)."""
    return gpu_metrics(pjs.operator.metrics()).get("allocated")


def test_a_pod_group_completes_after_the_pod_gc_took_its_early_finished_pod(pjs: Jobs, dev_cluster: DevCluster) -> None:
    """Before ``succeededPods`` covered pod groups, the adopting job stayed Running, holding its GPUs, once
    the finished index's pod was collected: the Job controller never makes that index again."""
    kube, ns, group = pjs.kube, pjs.namespace, "grouped"
    batch: Any = BatchV1Api(kube.api)
    kube.run(batch.create_namespaced_job(ns, pod_group_job(group, 4, 1, 2)))

    def group_pods() -> dict[int, Any]:
        listed = kube.run(kube.core.list_namespaced_pod(ns, label_selector=f"{POD_GROUP_LABEL}={group}"))
        live = (p for p in listed.items if not p.metadata.deletion_timestamp)
        return {int(p.metadata.annotations[COMPLETION_INDEX_KEY]): p for p in live}

    pjs.wait_phase(group, "Running")
    wait_for("both indices bound", lambda: [bool(p.spec.node_name) for p in group_pods().values()] == [True] * 2)
    early = group_pods()[0]
    finish(pjs, early.metadata.name)
    wait_for("the index in status.succeededPods", lambda: len(pjs.status(group).get("succeededPods") or {}) == 1)
    finished_elsewhere(pjs, early.spec.node_name)
    wait_for(f"the pod GC deleting {early.metadata.name}", lambda: phase(pjs, early.metadata.name) == "gone", 120)
    # the newer finished pod goes too, so that the last index's pod is not the oldest terminated one when it ends
    pjs.kube.run(pjs.kube.core.delete_namespaced_pod("zz-elsewhere", ns, grace_period_seconds=0))
    wait_for("zz-elsewhere gone", lambda: phase(pjs, "zz-elsewhere") == "gone")
    assert pjs.status(group)["phase"] == "Running"
    assert sorted(group_pods()) == [1], "the Job controller made no new pod for the finished index"
    # every surface: describe names the collected rank, and /metrics keeps its GPUs with the group until it ends
    described = json.loads(paralleljob_cli(dev_cluster.kubeconfig, "describe", f"{ns}/{group}", "-o", "json"))
    assert sorted(p["pod_phase"] for p in described["pods"]) == ["Running", "Succeeded (pod deleted)"], described
    wait_for("the group's 8 GPUs allocated on /metrics", lambda: allocated(pjs) == 8)
    finish(pjs, group_pods()[1].metadata.name)
    status = pjs.wait_phase(group, "Succeeded")
    assert status["message"] == "all 2 workers succeeded", status
    wait_for("the group's GPUs free on /metrics", lambda: allocated(pjs) == 0)
    # and the Job controller agrees: both indices succeeded, each once
    def job_counted() -> Any:
        job = kube.run(batch.read_namespaced_job(group, ns))
        return job if job.status.succeeded == 2 else None

    job = wait_for("the Job counting both indices", job_counted)
    assert job.status.completed_indexes == "0,1" and not job.status.failed, job.status

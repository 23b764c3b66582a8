"""Ranks that finish before the rest of their job: their pods may be deleted (kube-controller-manager's pod GC
deletes the oldest terminated pods once a cluster holds more than ``--terminated-pod-gc-threshold``, 12,500
by default, and a long job's early-finished ranks are among the oldest), and a finished rank must not run
again, nor stop its job from completing.

The module runs on a cluster of its own with the real pod GC on, keeping a single terminated pod.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gangapi import own_cluster
from pjhelpers import Jobs, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION
from paralleljob.devcluster.session import KubeSession

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
    pods = {p.metadata.name: p for p in pjs.pods()}
    return str(pods[pod_name].status.phase) if pod_name in pods else "gone"


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

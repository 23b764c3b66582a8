"""Every kind of gang's repair holds the other chains back (``executor.puts_pods_into_running_gang``, issue 41's
hold-back, ``Lanes.repairing``): what the planner decides when a running ParallelJob on HGX nodes or on NVL72
trays, an adopted pod group or a native PodGroup gets a pod back, and when an elastic job grows, is a chain
the executor treats as one that puts pods into a running gang; the first placement of each is not."""

from __future__ import annotations

from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.runtime.executor import puts_pods_into_running_gang
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_k8s_elastic import KEY, _cluster, _elastic
from tests.k8s.test_k8s_pod_groups import by_index, cluster_with, group_pod
from tests.k8s.test_native_pod_groups import add, adopt, native_pod, pod_group
from tests.k8s.test_tray_failure_policy import _cluster as tray_cluster
from tests.k8s.test_tray_failure_policy import _not_ready, _record


def pod_work(fc: FakeCluster, key: str, passes: int = 4) -> list[JobActions]:
    """The chains of ``key`` that create or bind pods over the next ``passes`` passes."""
    out: list[JobActions] = []
    for _ in range(passes):
        out += [a for a in fc.step().jobs if a.job.key == key and (a.creates or a.binds)]
    return out


def placed_then_mended(first: list[JobActions], mending: list[JobActions]) -> None:
    assert first and not any(puts_pods_into_running_gang(a) for a in first), "placing a new gang is no repair"
    assert mending and all(puts_pods_into_running_gang(a) for a in mending), [a.job.phase for a in mending]


def test_a_parallel_job_on_hgx_nodes() -> None:
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 2}") for i in range(4)])
    fc.add_job(paralleljob("llm", 4, 2, 2))
    first = pod_work(fc, "ns/llm")
    assert fc.phase("ns/llm") == "Running"
    lost = sorted(p["spec"]["nodeName"] for p in fc.job_pods("ns/llm"))[0]
    fc.nodes[lost] = node(lost, ready=False, leaf="leaf-0")
    placed_then_mended(first, pod_work(fc, "ns/llm"))
    assert fc.phase("ns/llm") == "Running" and lost not in {p["spec"]["nodeName"] for p in fc.job_pods("ns/llm")}


def test_a_parallel_job_on_nvl72_trays() -> None:
    fc = tray_cluster()
    fc.add_job(paralleljob("llm", 8, 1, 2, memory=10.0))
    first = pod_work(fc, "ns/llm")
    _not_ready(fc, _record(fc).trays[0].node)
    placed_then_mended(first, pod_work(fc, "ns/llm"))
    assert fc.phase("ns/llm") == "Running"


def test_an_adopted_pod_group_whose_owner_replaced_a_pod() -> None:
    fc = cluster_with([group_pod(i) for i in range(4)])
    first = pod_work(fc, "ns/llm")
    assert fc.phase("ns/llm") == "Running"
    del fc.pods[("ns", by_index(fc)[1]["metadata"]["name"])]
    replacement = group_pod(1)
    fc.pods[("ns", replacement["metadata"]["name"])] = replacement
    placed_then_mended(first, pod_work(fc, "ns/llm"))
    assert by_index(fc)[1]["spec"].get("nodeName"), "the replacement was bound"


def test_a_native_podgroup_whose_owner_replaced_a_pod() -> None:
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 2}") for i in range(4)])
    fc.pod_groups["ns/llm-workers"] = pod_group()
    add(fc, *(native_pod(r) for r in range(4)))
    adopt(fc)
    first = pod_work(fc, "ns/llm-workers")
    assert fc.phase("ns/llm-workers") == "Running"
    del fc.pods[("ns", "w-1")]
    add(fc, native_pod(1))
    placed_then_mended(first, pod_work(fc, "ns/llm-workers"))
    assert fc.pods[("ns", "w-1")]["spec"].get("nodeName"), "the replacement was bound"


def test_an_elastic_job_growing_into_freed_room() -> None:
    fc = _cluster(4)
    fc.add_job(paralleljob("filler", 8, 1, 1, memory=0.0))
    fc.settle(2)
    fc.add_job(_elastic())
    first = pod_work(fc, KEY, passes=3)
    assert fc.job(KEY)["status"]["replicas"] == 3
    del fc.jobs["ns/filler"]
    placed_then_mended(first, pod_work(fc, KEY, passes=3))
    assert fc.job(KEY)["status"]["replicas"] == 4

"""Jobs on MIG slices of device-plugin nodes through the operator's pure pass (issue 44, the GPU Operator's mixed
strategy): nodes offering ``nvidia.com/mig-<profile>`` as mig-manager leaves them, slice jobs packed onto them
with pods asking for the profile, whole-GPU jobs kept on whole GPUs, a full cluster's wait said, an unhealthy
GPU failing every slice job on its node through each job's policy, and what other pods hold counted."""

from __future__ import annotations

from typing import Any

from paralleljob.core.rankorder import RankOrder
from paralleljob.devcluster.nodes import NodeShape, gpu_node_manifest
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.status.records import MigGrant, PlacementRecord, PodSlot, record_from_status
from paralleljob.k8s.plan.actions import PodCreate
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

ONE = "1g.10gb"
MIG_LABELS = {
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-1g.10gb",
    "nvidia.com/mig.config.state": "success",
}


def mig_node(name: str, slices: int = 56, whole: int = 0, **kw: Any) -> dict[str, Any]:
    """A node mig-manager set up (mixed strategy): ``whole`` GPUs not in MIG mode, the rest in 1g.10gb."""
    body = node(name, 8, labels=dict(MIG_LABELS), **kw)
    body["status"]["allocatable"]["nvidia.com/gpu"] = str(whole)
    body["status"]["allocatable"][f"nvidia.com/mig-{ONE}"] = str(slices)
    return body


def slice_job(name: str, dp: int = 1, profile: str = ONE, **policy: Any) -> dict[str, Any]:
    return paralleljob(name, tp=1, pp=1, dp=dp, memory=0, extra_spec={"gpuSharing": {"migProfile": profile}}, **policy)


def creates(cluster: FakeCluster) -> list[PodCreate]:
    assert cluster.last_plan is not None
    return [c for actions in cluster.last_plan.jobs for c in actions.creates]


def pods_of(cluster: FakeCluster, key: str) -> list[dict[str, Any]]:
    return list(cluster.job(key)["status"]["placement"]["pods"])


def test_slice_jobs_ask_the_device_plugin_for_the_profile_on_the_sliced_node() -> None:
    cluster = FakeCluster([mig_node("mig-0"), mig_node("mig-1"), node("hgx-0")])
    cluster.add_job(slice_job("a", dp=2))
    cluster.step()
    made = creates(cluster)
    assert "the device plugin picks each GPU" in cluster.job("ns/a")["status"]["message"]
    cluster.settle(3)
    assert cluster.phase("ns/a") == "Running"
    pods = pods_of(cluster, "ns/a")
    # both ranks on one MIG node, no GPU named: the device plugin picks it
    assert {p["node"] for p in pods} == {"mig-0"} and all(p["gpuIndices"] == [] for p in pods)
    assert all(p["migSlice"] == {"profile": ONE} for p in pods)
    assert len(made) == 2 and all(c.claim is None and c.node == "mig-0" for c in made)
    resources = made[0].manifest["spec"]["containers"][0]["resources"]
    assert resources["limits"][f"nvidia.com/mig-{ONE}"] == "1" and "nvidia.com/gpu" not in resources["limits"]

    # the next slice job packs onto the node already sliced, not the untouched one
    cluster.add_job(slice_job("b", dp=3))
    cluster.settle(3)
    assert {p["node"] for p in pods_of(cluster, "ns/b")} == {"mig-0"}


def test_a_whole_gpu_job_gets_a_whole_node_while_slices_run() -> None:
    cluster = FakeCluster([mig_node("mig-0"), mig_node("mig-1", whole=4), node("hgx-0")])
    cluster.add_job(slice_job("small", dp=4))
    cluster.settle(3)
    cluster.add_job(paralleljob("big", tp=8, pp=1, dp=1, memory=0))
    cluster.add_job(paralleljob("half", tp=4, pp=1, dp=1, memory=0))
    cluster.settle(4)
    assert cluster.phase("ns/big") == cluster.phase("ns/half") == "Running"
    assert {p["node"] for p in pods_of(cluster, "ns/big")} == {"hgx-0"}
    # mig-1's four whole GPUs are its nvidia.com/gpu; the MIG GPUs are never counted whole
    (half,) = pods_of(cluster, "ns/half")
    assert half["node"] == "mig-1" and len(half["gpuIndices"]) == 4
    cluster.add_job(paralleljob("more", tp=8, pp=1, dp=1, memory=0))
    cluster.settle(3)
    message = cluster.job("ns/more")["status"]["message"]
    assert cluster.phase("ns/more") == "Queued" and "12 GPU(s) of device-plugin node(s) mig-0, mig-1" in message


def test_a_job_waits_saying_no_node_has_its_profile_free() -> None:
    cluster = FakeCluster([mig_node("mig-0", slices=2)])
    cluster.add_job(slice_job("three", dp=3))
    cluster.settle(3)
    status = cluster.job("ns/three")["status"]
    assert status["phase"] == "Queued"
    assert "no node has a MIG 1g.10gb slice free" in status["message"]
    assert "mig-0: all 2 MIG 1g.10gb slices taken" in status["message"]
    del cluster.jobs["ns/three"]
    cluster.add_job(slice_job("other", profile="3g.40gb"))
    cluster.settle(3)
    other = cluster.job("ns/other")["status"]
    assert other["phase"] == "Queued" and "offers no MIG 3g.40gb (it offers 2 x 1g.10gb)" in other["message"]


def test_slices_other_pods_hold_are_not_offered() -> None:
    cluster = FakeCluster([mig_node("mig-0", slices=2), mig_node("mig-1", slices=2)])
    cluster.pods[("other", "theirs")] = {
        "metadata": {"name": "theirs", "namespace": "other", "uid": "uid-theirs"},
        "spec": {
            "nodeName": "mig-0",
            "containers": [{"name": "c", "resources": {"limits": {f"nvidia.com/mig-{ONE}": "2"}}}],
        },
        "status": {"phase": "Running"},
    }
    cluster.add_job(slice_job("mine", dp=2))
    cluster.settle(3)
    assert {p["node"] for p in pods_of(cluster, "ns/mine")} == {"mig-1"}


def test_an_unhealthy_gpu_fails_every_slice_job_on_its_node_through_each_policy() -> None:
    cluster = FakeCluster([mig_node("mig-0"), mig_node("mig-1")])
    cluster.add_job(slice_job("fragile", max_restarts=0))
    cluster.add_job(slice_job("sturdy", dp=2))
    cluster.settle(4)
    assert {p["node"] for p in pods_of(cluster, "ns/fragile") + pods_of(cluster, "ns/sturdy")} == {"mig-0"}
    cluster.nodes["mig-0"] = mig_node("mig-0", unhealthy="3")
    made = []
    for _ in range(4):
        cluster.step()
        made += creates(cluster)
    fragile, sturdy = cluster.job("ns/fragile")["status"], cluster.job("ns/sturdy")["status"]
    assert fragile["phase"] == "Failed" and "maxRestarts 0 reached" in fragile["message"]
    assert fragile["lastFailure"]["kind"] == "GPUFailure"
    message = sturdy["lastFailure"]["message"]
    assert "GPU 3 on mig-0 reported unhealthy" in message and "cannot tell which slices" in message
    assert sturdy["phase"] == "Running" and sturdy["restarts"] == 1
    assert {p["node"] for p in sturdy["placement"]["pods"]} == {"mig-1"}
    moved = [c for c in made if c.manifest["metadata"]["name"].startswith("sturdy")]
    assert len(moved) == 2 and {c.node for c in moved} == {"mig-1"}
    # the broken node takes no new slice while its GPU is unhealthy: a new job goes elsewhere
    cluster.add_job(slice_job("late"))
    cluster.settle(3)
    assert {p["node"] for p in pods_of(cluster, "ns/late")} == {"mig-1"}


def test_a_record_of_device_plugin_slices_reads_back_as_written() -> None:
    slots = tuple(PodSlot(f"j-d{d}-p0", d, 0, "mig-0", (), 1, MigGrant(ONE, None)) for d in range(2))
    record = PlacementRecord(1, "seed", 1, 1, 2, slots, RankOrder.TP_DP_PP)
    status = record.to_status()
    assert status["pods"][0]["migSlice"] == {"profile": ONE} and status["pods"][0]["gpuIndices"] == []
    back = record_from_status({"placement": status})
    assert back is not None and back.slots == slots and back.sliced and back.pooled


def test_the_dev_clusters_mig_node_has_no_whole_gpu_and_offers_its_slices() -> None:
    info = parse_node(gpu_node_manifest(NodeShape(count=1, mig_nodes=1), 0), TopologyConfig())
    assert info.gpu_count == 0 and info.mig is not None and info.mig.count(ONE) == 56


def test_every_surface_shows_the_device_plugins_slices() -> None:
    from rich.console import Console

    from paralleljob.clitools.describe import describe_job
    from paralleljob.clitools.gpumap import build_map
    from paralleljob.clitools.render import gpu_map_renderable, print_renderable
    from paralleljob.dashboard.model import pack_slots, picture
    from paralleljob.k8s.plan.metrics_model import gauges

    cluster = FakeCluster([mig_node("mig-0"), mig_node("mig-1", whole=4), node("hgx-0")])
    cluster.add_job(slice_job("a", dp=2))
    cluster.add_job(slice_job("b"))
    cluster.settle(4)
    plan, view = cluster.step(), cluster.last_view
    assert view is not None
    g = gauges(view, plan.jobs, {})
    # the gauges count the slices by profile, and mig-0's eight MIG GPUs as sliced (which hold them is unknown)
    assert g.mig_slices == {ONE: 3} and g.sliced_gpus == 8
    assert g.gpus["allocated"] == 0 and g.gpus["free"] == 12  # hgx-0's 8 and mig-1's 4 whole GPUs

    gpu_map = build_map(list(cluster.nodes.values()), list(cluster.pods.values()), list(cluster.jobs.values()))
    rows = {row.name: row for row in gpu_map.pools}
    assert set(rows) == {"mig-0", "mig-1"} and rows["mig-0"].held == {ONE: 3} and rows["mig-0"].offered == {ONE: 56}
    assert rows["mig-0"].slices == (f"ns/a {ONE} x2", f"ns/b {ONE} x1") and rows["mig-0"].config == "all-1g.10gb"
    console = Console(width=160, record=True)
    print_renderable(gpu_map_renderable(gpu_map), console)
    text = console.export_text()
    assert "MIG slices on device-plugin nodes" in text and f"3/56 {ONE}" in text and "ns/a 1g.10gb x2" in text

    snapshot = picture(gpu_map, list(cluster.jobs.values()))
    assert [p["name"] for p in snapshot["migPools"]] == ["mig-0", "mig-1"]
    slots = pack_slots(record_from_status(cluster.job("ns/a")["status"]))  # type: ignore[arg-type]
    assert [(s["node"], s["gpuIndices"], s["migSlice"]) for s in slots] == [("mig-0", [], {"profile": ONE})] * 2

    described = describe_job(cluster.job("ns/a"), cluster.job_pods("ns/a"))
    assert described.mig_profile == ONE and [p.mig for p in described.pods] == [ONE, ONE]


def test_an_unhealthy_mig_mode_gpu_is_no_malformed_index() -> None:
    info = parse_node(mig_node("mig-0", unhealthy="3"), TopologyConfig())
    assert info.unhealthy_gpus == frozenset({3}) and not info.warnings
    assert parse_node(mig_node("mig-0", unhealthy="9"), TopologyConfig()).warnings


def test_the_gauges_count_slices_on_a_cluster_of_mig_only_nodes() -> None:
    """Every node MIG-only (no whole GPU anywhere: an empty topology): the slices are still counted."""
    from paralleljob.k8s.plan.metrics_model import gauges

    cluster = FakeCluster([mig_node("mig-0"), mig_node("mig-1")])
    cluster.add_job(slice_job("a", dp=2))
    cluster.settle(4)
    plan, view = cluster.step(), cluster.last_view
    assert view is not None and view.empty
    assert [p["node"] for p in pods_of(cluster, "ns/a")] == ["mig-0", "mig-0"]
    g = gauges(view, plan.jobs, {})
    assert g.mig_slices == {ONE: 2} and g.sliced_gpus == 8
    assert g.gpus["allocated"] == 0 and g.gpus["free"] == 0

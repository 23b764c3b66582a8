"""Jobs on MIG slices through the operator's pure pass (issue 44 items 1-4): a DRA node whose driver publishes
MIG devices in the partitionable shape (the dev cluster's ``devcluster/migslices.py``), parsed into
``NodeInfo.mig``; slice jobs packed onto one GPU with claims naming the exact MIG devices; whole-GPU jobs kept
off a sliced GPU and told so; a broken GPU failing the slices on it through each job's failure policy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from paralleljob.core.admit.queueing import QueuePolicy
from paralleljob.core.slices.mig import GPU_80GB
from paralleljob.devcluster.migslices import mig_device_name
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.plan.actions import PodCreate
from tests.k8s import harness
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.migworld import MIG_NODE, dra_node, mig_overlay, mig_pool

ONE = GPU_80GB.profile("1g.10gb")


def slices_of(name: str) -> list[dict[str, Any]]:
    return mig_pool(name)


@pytest.fixture
def dra_world() -> Iterator[list[dict[str, Any]]]:
    """Nodes parsed through the DRA overlay with ``mig-0``'s pool (and the claims a test appends)."""
    with mig_overlay() as claims:
        yield claims


def slice_job(name: str, dp: int = 1, **policy: Any) -> dict[str, Any]:
    return paralleljob(
        name, tp=1, pp=1, dp=dp, memory=0, extra_spec={"gpuSharing": {"migProfile": "1g.10gb"}}, **policy
    )


def pinned(body: dict[str, Any], node_name: str) -> dict[str, Any]:
    body["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    return body


def creates(cluster: FakeCluster) -> list[PodCreate]:
    assert cluster.last_plan is not None
    return [c for actions in cluster.last_plan.jobs for c in actions.creates]


def placement(cluster: FakeCluster, key: str) -> list[dict[str, Any]]:
    return list(cluster.job(key)["status"]["placement"]["pods"])


def test_the_partitionable_pool_is_parsed_into_the_nodes_mig_offer(dra_world: list[dict[str, Any]]) -> None:
    info = harness.parse_node(dra_node(MIG_NODE), TopologyConfig())
    assert info.gpu_count == 8 and info.dra is not None and info.mig is not None
    offer = info.mig
    assert offer.api == "dra" and offer.device_class == "mig.nvidia.com" and len(offer.gpus) == 8
    assert offer.profiles == ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
    # every placement the 80 GB parts have, on every GPU, named as NVIDIA's driver names them
    assert len(offer.gpus[3].devices) == sum(len(p.starts) for p in GPU_80GB.profiles) == 18
    assert offer.gpus[3].device("1g.10gb", 5) == "gpu-3-mig-1g10gb-19-5" == mig_device_name(3, ONE, 5)
    assert offer.gpus[3].device("3g.40gb", 4) == "gpu-3-mig-3g40gb-9-4"
    assert not info.held_gpus and not info.warnings

    # another scheduler's claim on a MIG device of GPU 5: GPU 5 is held, never whole for anyone
    dra_world.append(claim("other", [("gpu.nvidia.com", MIG_NODE, "gpu-5-mig-2g20gb-14-2")]))
    held = harness.parse_node(dra_node(MIG_NODE), TopologyConfig())
    assert held.held_gpus == frozenset({5}) and held.mig is not None
    assert held.mig.gpus[5].held == frozenset({"gpu-5-mig-2g20gb-14-2"})


def claim(name: str, results: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "other", "uid": f"uid-{name}"},
        "status": {
            "allocation": {"devices": {"results": [{"driver": d, "pool": p, "device": x} for d, p, x in results]}}
        },
    }


@pytest.mark.parametrize("policy", [None, QueuePolicy()], ids=["fifo", "queueing pass"])
def test_two_slice_jobs_share_one_gpu_with_claims_naming_the_exact_mig_devices(
    dra_world: list[dict[str, Any]], policy: QueuePolicy | None
) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE), node("hgx-1")], policy=policy)
    cluster.add_job(slice_job("a"))
    cluster.step()
    cluster.step()
    cluster.add_job(slice_job("b"))
    cluster.step()
    made = creates(cluster)
    cluster.settle()
    assert cluster.phase("ns/a") == cluster.phase("ns/b") == "Running"
    a, b = placement(cluster, "ns/a")[0], placement(cluster, "ns/b")[0]
    # packed: the second slice onto the GPU the first already slices, on the MIG node
    assert (a["node"], a["gpuIndices"]) == (b["node"], b["gpuIndices"]) == (MIG_NODE, [a["gpuIndices"][0]])
    assert a["migSlice"]["profile"] == b["migSlice"]["profile"] == "1g.10gb"
    assert a["migSlice"]["start"] != b["migSlice"]["start"]
    (create,) = made
    assert create.claim is not None and create.claim.device_class == "mig.nvidia.com"
    gpu = b["gpuIndices"][0]
    assert create.claim.devices == (mig_device_name(gpu, ONE, b["migSlice"]["start"]),)
    annotations = create.manifest["metadata"]["annotations"]
    assert annotations["paralleljob.dev/mig-slice"] == f"1g.10gb@{b['migSlice']['start']}"
    container = create.manifest["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert (
        "communicationCost" not in cluster.job("ns/b")["status"]
        or not cluster.job("ns/b")["status"]["communicationCost"]
    )


def test_a_whole_gpu_job_never_gets_a_sliced_gpu_and_is_told_why_it_waits(dra_world: list[dict[str, Any]]) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE)])
    cluster.add_job(slice_job("small"))
    cluster.settle(3)
    sliced = placement(cluster, "ns/small")[0]["gpuIndices"][0]
    cluster.add_job(pinned(paralleljob("big", tp=8, pp=1, dp=1, memory=0), MIG_NODE))
    cluster.settle(3)
    status = cluster.job("ns/big")["status"]
    assert status["phase"] == "Queued"
    assert (
        "hold MIG slices and are not offered whole" in status["message"]
        and f"{MIG_NODE} GPU {sliced}" in status["message"]
    )
    del cluster.jobs["ns/big"]
    cluster.add_job(paralleljob("seven", tp=7, pp=1, dp=1, memory=0))
    cluster.settle(3)
    assert cluster.phase("ns/seven") == "Running"
    (pod,) = placement(cluster, "ns/seven")
    assert sliced not in pod["gpuIndices"] and len(pod["gpuIndices"]) == 7


def test_an_unhealthy_gpu_fails_the_slices_on_it_through_each_jobs_policy(dra_world: list[dict[str, Any]]) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE)])
    cluster.add_job(slice_job("fragile", max_restarts=0))
    cluster.add_job(slice_job("sturdy"))
    cluster.settle(4)
    gpu = placement(cluster, "ns/fragile")[0]["gpuIndices"][0]
    assert placement(cluster, "ns/sturdy")[0]["gpuIndices"] == [gpu]
    broken = dra_node(MIG_NODE)
    broken["metadata"]["annotations"]["paralleljob.dev/unhealthy-gpus"] = str(gpu)
    cluster.nodes[MIG_NODE] = broken
    made = []
    for _ in range(4):  # the old pod goes first (its name is fixed), its replacement in a later pass
        cluster.step()
        made += creates(cluster)
    fragile, sturdy = cluster.job("ns/fragile")["status"], cluster.job("ns/sturdy")["status"]
    assert fragile["phase"] == "Failed" and "maxRestarts 0 reached" in fragile["message"]
    assert fragile["lastFailure"]["kind"] == "GPUFailure" and fragile["lastFailure"]["action"] == "failed"
    assert sturdy["phase"] == "Running" and sturdy["restarts"] == 1
    assert sturdy["lastFailure"]["action"] == "rescheduled"
    (moved,) = sturdy["placement"]["pods"]
    assert moved["gpuIndices"] != [gpu] and moved["node"] == MIG_NODE
    (create,) = [c for c in made if c.manifest["metadata"]["name"].startswith("sturdy")]
    assert create.claim is not None
    assert create.claim.devices == (mig_device_name(moved["gpuIndices"][0], ONE, moved["migSlice"]["start"]),)


def test_no_mig_node_means_the_slice_job_waits_saying_so() -> None:
    cluster = FakeCluster([node("hgx-0")])
    cluster.add_job(slice_job("small"))
    cluster.settle(3)
    status = cluster.job("ns/small")["status"]
    assert status["phase"] == "Queued" and "no node offers MIG 1g.10gb" in status["message"]


def test_ranks_of_one_job_pack_onto_one_gpu_before_the_next(dra_world: list[dict[str, Any]]) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE)])
    cluster.add_job(slice_job("eight", dp=8))
    cluster.settle(3)
    pods = placement(cluster, "ns/eight")
    gpus = [p["gpuIndices"][0] for p in pods]
    # seven 1g slices fill a GPU's compute: the eighth rank goes to a second GPU
    assert sorted(gpus.count(g) for g in set(gpus)) == [1, 7]
    assert len({(p["gpuIndices"][0], p["migSlice"]["start"]) for p in pods}) == 8


def test_the_gpu_map_and_describe_show_the_slices(dra_world: list[dict[str, Any]]) -> None:
    from paralleljob.clitools.describe import describe_job
    from paralleljob.clitools.gpumap import DraObjects, build_map
    from paralleljob.clitools.jobrender import description_renderable
    from paralleljob.clitools.render import gpu_map_renderable, print_renderable

    cluster = FakeCluster([dra_node(MIG_NODE)])
    for name in ("a", "b"):
        cluster.add_job(slice_job(name))
    cluster.settle(4)
    gpu = placement(cluster, "ns/a")[0]["gpuIndices"][0]
    starts = sorted(placement(cluster, f"ns/{n}")[0]["migSlice"]["start"] for n in ("a", "b"))
    gpu_map = build_map(
        list(cluster.nodes.values()), list(cluster.pods.values()), list(cluster.jobs.values()),
        dra_objects=DraObjects(slices=slices_of(MIG_NODE)),
    )  # fmt: skip
    (row,) = gpu_map.nodes
    cell = row.gpus[gpu]
    assert cell.state == "used" and cell.holder == f"sliced:{MIG_NODE}/{gpu}"
    assert {text.split()[0] for text in cell.slices} == {"ns/a", "ns/b"}
    assert [text.split()[1] for text in cell.slices] == [f"1g.10gb@{s}" for s in starts]
    assert gpu_map.totals["used"] == 1  # one GPU, however many slices
    console = Console(width=160, record=True)
    print_renderable(gpu_map_renderable(gpu_map), console)
    text = console.export_text()
    assert f"s [{gpu}] MIG ns/" in text and "s MIG slices or MPS shares of jobs" in text

    described = describe_job(cluster.job("ns/a"), cluster.job_pods("ns/a"))
    assert described.mig_profile == "1g.10gb" and described.pods[0].mig.startswith("1g.10gb@")
    console = Console(width=160, record=True)
    print_renderable(description_renderable(described), console)
    shown = console.export_text()
    assert "1 MIG 1g.10gb slices" in shown and "MIG slice" in shown


def test_the_gauges_count_slices_and_a_sliced_gpu_is_not_free(dra_world: list[dict[str, Any]]) -> None:
    from paralleljob.k8s.plan.metrics_model import gauges

    cluster = FakeCluster([dra_node(MIG_NODE), node("hgx-1")])
    for name in ("a", "b"):
        cluster.add_job(slice_job(name))
    cluster.settle(4)
    plan, view = cluster.step(), cluster.last_view
    assert view is not None
    g = gauges(view, plan.jobs, {})
    assert g.sliced_gpus == 1 and g.mig_slices == {"1g.10gb": 2}
    assert g.gpus["allocated"] == 1 and g.gpus["free"] == 15
    # the MIG node is partly used now: its 7 free GPUs are stranded for a gang wanting whole nodes
    assert g.fragmentation == pytest.approx(7 / 15)


def test_sliced_gpus_follow_the_state_through_a_trial_given_back(dra_world: list[dict[str, Any]]) -> None:
    """The gauges read the view's named holders, not every assumed one: a slice held inside a pass's trial
    counts while it lasts and not after its rollback, beside pods no record explains."""
    from paralleljob.k8s.plan.slices.book import sliced_gpus, sliced_note
    from paralleljob.k8s.view.clusterview import hold_slice
    from tests.k8s.factories import foreign_pod

    cluster = FakeCluster([dra_node(MIG_NODE), node("hgx-1")])
    cluster.add_job(slice_job("a"))
    for i in range(3):
        cluster.pods[("other", f"web-{i}")] = foreign_pod(f"web-{i}", "hgx-1", 1)
    cluster.settle(4)
    cluster.step()
    view = cluster.last_view
    assert view is not None
    before = sliced_gpus(view)
    assert sum(map(len, before.values())) == 1
    free = next(i for i in range(8) if i not in before.get(MIG_NODE, []))
    view.state.begin_trial()
    hold_slice(view, MIG_NODE, free)
    assert free in sliced_gpus(view)[MIG_NODE]
    assert "MIG slices" in sliced_note(view)
    view.state.rollback()
    assert sliced_gpus(view) == before


def test_slices_moved_in_one_pass_never_take_the_same_placement(dra_world: list[dict[str, Any]]) -> None:
    # each job's repair sees the slices the pass placed before it, though no record has them yet
    cluster = FakeCluster([dra_node(MIG_NODE)])
    for name in ("a", "b"):
        cluster.add_job(slice_job(name))
    cluster.settle(4)
    gpu = placement(cluster, "ns/a")[0]["gpuIndices"][0]
    broken = dra_node(MIG_NODE)
    broken["metadata"]["annotations"]["paralleljob.dev/unhealthy-gpus"] = str(gpu)
    cluster.nodes[MIG_NODE] = broken
    cluster.settle(4)
    moved = [placement(cluster, f"ns/{n}")[0] for n in ("a", "b")]
    assert all(cluster.phase(f"ns/{n}") == "Running" for n in ("a", "b"))
    assert moved[0]["gpuIndices"] == moved[1]["gpuIndices"] != [gpu], "packed together again"
    assert moved[0]["migSlice"]["start"] != moved[1]["migSlice"]["start"]


def test_slice_jobs_of_two_queues_admitted_in_one_pass_take_different_slices(
    dra_world: list[dict[str, Any]],
) -> None:
    from paralleljob.k8s.edge.parse.queues import QueueInfo

    cluster = FakeCluster([dra_node(MIG_NODE)], queues={q: QueueInfo(q) for q in ("q1", "q2")})
    for name, queue in (("a", "q1"), ("b", "q2")):
        cluster.add_job(slice_job(name, queue=queue))
    cluster.step()
    cluster.step()  # accepted, then both admitted in one pass, each queue's line in its own call
    a, b = (placement(cluster, f"ns/{n}")[0] for n in ("a", "b"))
    assert (a["gpuIndices"], a["migSlice"]["start"]) != (b["gpuIndices"], b["migSlice"]["start"])


def test_a_slice_whose_mig_device_is_no_longer_published_moves() -> None:
    dropped: set[str] = set()
    with mig_overlay(dropped=dropped):
        cluster = FakeCluster([dra_node(MIG_NODE)])
        cluster.add_job(slice_job("a"))
        cluster.settle(3)
        before = placement(cluster, "ns/a")[0]
        dropped.add(mig_device_name(before["gpuIndices"][0], ONE, before["migSlice"]["start"]))
        cluster.nodes[MIG_NODE] = dra_node(MIG_NODE)  # the node's pool changed: a new body, as a watch brings
        made = []
        for _ in range(4):
            cluster.step()
            made += creates(cluster)
        status = cluster.job("ns/a")["status"]
    after = status["placement"]["pods"][0]
    assert status["phase"] == "Running" and status["restarts"] == 1
    assert "no longer published" in status["lastFailure"]["message"]
    assert (after["gpuIndices"], after["migSlice"]) != (before["gpuIndices"], before["migSlice"])
    (create,) = made
    assert create.claim is not None and create.claim.devices[0] not in dropped


def test_a_slice_jobs_messages_count_slices_not_gpus(dra_world: list[dict[str, Any]]) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE)])
    cluster.add_job(slice_job("a", dp=2))
    cluster.settle(3)
    conditions = {c["type"]: c for c in cluster.job("ns/a")["status"]["conditions"]}
    assert conditions["Accepted"]["message"] == "TP1xPP1xDP2 (2 x MIG 1g.10gb) accepted into queue default"

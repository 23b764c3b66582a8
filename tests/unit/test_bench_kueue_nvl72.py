"""``bench kueue --kueue-nvl72`` without a cluster: the tray background and gangs, the JobSet a gang becomes
for Kueue TAS on GB200 trays (one 4-GPU pod per tray, three annotation variants), the TP groups read back
from pod indices and from a ParallelJob's status, their score, and the comparison and table it reports."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from paralleljob.core import ClusterState, JobSpec, cost_model
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.topology import Level
from paralleljob.devcluster.nodes import SPINE_LABEL
from paralleljob.devtools.bench_kueue_nvl72 import (
    KueueTrays,
    tray_jobset_manifest,
    tray_kueue_objects,
    variant_annotations,
)
from paralleljob.devtools.bench_native import GANG_LABEL
from paralleljob.devtools.kueue_nvl72_report import compare, table
from paralleljob.devtools.native_set import Gang
from paralleljob.devtools.nvl72_kueue_set import (
    beyond_clique,
    clique_fit,
    free_trays,
    groups_from_ranks,
    nvl72_gangs,
    ranks_from_status,
    tray_background,
    tray_cost,
    tray_pods,
)

CLIQUE = "nvidia.com/gpu.clique"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def test_the_background_is_about_half_full_seeded_and_leaves_the_cliques_unequal() -> None:
    used = tray_background(4, 0.5, seed=1)
    assert 0.5 * 288 - 32 <= sum(used.values()) <= 0.5 * 288
    assert all(0 < gpus <= 4 for gpus in used.values()) and max(used) < 72
    assert tray_background(4, 0.5, seed=1) == used
    free = free_trays(used, 4)
    assert len(free) == 4 and len(set(free)) > 1 and any(0 < f < 18 for f in free)


def test_free_trays_counts_only_trays_with_every_gpu_free() -> None:
    assert free_trays({0: 4, 1: 1, 20: 2}, 2) == [16, 17]


def test_the_gangs_are_tp4_or_tp8_within_an_empty_clique_and_alternate_cost_models() -> None:
    gangs = nvl72_gangs(30, seed=1)
    assert len({g.name for g in gangs}) == 30 and gangs == nvl72_gangs(30, seed=1)
    assert all(g.tp in (4, 8) and 4 < g.gpus <= 48 for g in gangs)
    assert {g.tp for g in gangs} == {4, 8}
    assert [g.cost_model for g in gangs[:4]] == ["seed", "megatron", "seed", "megatron"]


def test_the_big_gangs_exceed_every_cliques_whole_free_trays_fit_three_quarters_of_them_and_alternate_tp() -> None:
    gangs = beyond_clique(3, [4, 9, 15, 10], seed=1)
    assert [g.name for g in gangs] == ["c00", "c01", "c02"]
    assert all(60 < g.gpus <= 114 for g in gangs) and [g.tp for g in gangs] == [8, 4, 8]
    assert beyond_clique(3, [18, 0, 1], seed=1) == []  # nothing above 72 and at most 57


def test_a_gang_is_one_indexed_job_of_one_four_gpu_pod_per_tray() -> None:
    gang = Gang("n001", tp=8, pp=2, dp=3, cost_model="seed")
    body = tray_jobset_manifest(gang, "n001-s1", variant_annotations("required", gang))
    job = body["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["completionMode"] == "Indexed" and job["parallelism"] == job["completions"] == 12 == tray_pods(gang)
    pod = job["template"]
    assert pod["metadata"]["annotations"] == {REQUIRED: CLIQUE}
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"nvidia.com/gpu": "4"}
    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "bench"}


def test_the_variants_differ_in_their_annotations_and_slices_are_the_tp_groups() -> None:
    tp8, tp4 = Gang("a", 8, 1, 4, "seed"), Gang("b", 4, 2, 2, "seed")
    assert variant_annotations("preferred", tp8) == {PREFERRED: CLIQUE}
    assert variant_annotations("sliced", tp8) == {
        PREFERRED: CLIQUE,
        "kueue.x-k8s.io/podset-slice-required-topology": CLIQUE,
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    assert variant_annotations("sliced", tp4) == {PREFERRED: CLIQUE}  # a TP group of one tray is no slice


def test_the_topology_is_spine_clique_hostname_and_the_flavor_takes_the_gb200_trays() -> None:
    objects = dict(tray_kueue_objects(["ns"], 288))
    topology = objects["/apis/kueue.x-k8s.io/v1beta2/topologies"]
    levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    assert levels == [SPINE_LABEL, CLIQUE, "kubernetes.io/hostname"]
    flavor = objects["/apis/kueue.x-k8s.io/v1beta2/resourceflavors"]["spec"]
    assert flavor == {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GB200"}, "topologyName": "cliques"}
    queue = objects["/apis/kueue.x-k8s.io/v1beta2/clusterqueues"]["spec"]["resourceGroups"][0]
    assert queue["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "288"}]


def test_pod_index_is_the_node_rank_and_tp_groups_are_consecutive_trays_in_megatrons_order() -> None:
    gang = Gang("g", tp=8, pp=2, dp=2, cost_model="seed")
    # tray pod i holds TP group rank i // 2 (its TP-rank half i % 2); in tp-dp-pp group rank r is replica
    # r % 2 of stage r // 2, i.e. group (r % 2) * 2 + r // 2: ranks 0, 1, 2, 3 are groups 0, 2, 1, 3
    nodes = {i: f"t{i}" for i in range(8)}
    assert groups_from_ranks(gang, nodes) == [["t0", "t1"], ["t4", "t5"], ["t2", "t3"], ["t6", "t7"]]
    assert groups_from_ranks(gang, {i: f"t{i}" for i in range(7)}) is None
    tp4 = Gang("h", tp=4, pp=1, dp=3, cost_model="seed")
    assert groups_from_ranks(tp4, {0: "a", 1: "b", 2: "c"}) == [["a"], ["b"], ["c"]]


class Tracker:
    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods


def test_kueues_pods_are_read_back_by_completion_index() -> None:
    gang = Gang("g", tp=8, pp=1, dp=2, cost_model="seed")
    kueue = KueueTrays(None, "kueue", "ns", GANG_LABEL)  # type: ignore[arg-type]  # groups_of reads no API

    def pod(index: int, node: str | None) -> dict[str, Any]:
        labels = {GANG_LABEL: "g", "batch.kubernetes.io/job-completion-index": str(index)}
        return {"name": f"g-{index}", "node": node, "labels": labels}

    whole = Tracker({f"u{i}": pod(i, f"t{9 - i}") for i in range(4)})
    assert asyncio.run(kueue.groups_of(gang, whole)) == [["t9", "t8"], ["t7", "t6"]]  # type: ignore[arg-type]
    partial = Tracker({f"u{i}": pod(i, f"t{i}" if i else None) for i in range(4)})
    assert asyncio.run(kueue.groups_of(gang, partial)) is None  # type: ignore[arg-type]


def test_a_parallel_jobs_status_gives_node_ranks_for_trays_and_for_one_pod_per_tp_group() -> None:
    gang = Gang("g", tp=4, pp=2, dp=2, cost_model="seed")
    trays = {"layout": "trays", "pods": [{"nodeRank": 1, "node": "b"}, {"nodeRank": 0, "node": "a"}]}
    assert ranks_from_status(gang, trays) == {0: "a", 1: "b"}
    pods = [{"replica": d, "stage": p, "node": f"r{d}s{p}"} for d in range(2) for p in range(2)]
    # tp-dp-pp: node rank = stage * dp + replica
    assert ranks_from_status(gang, {"pods": pods}) == {0: "r0s0", 1: "r1s0", 2: "r0s1", 3: "r1s1"}


def topologies() -> tuple[Any, Any]:
    nvlink = nvl72_topology(2, racks_per_spine=1)
    levels = list(nvlink.levels)
    levels[1] = Level(levels[1].name, levels[2].bandwidth_gbps)  # the clique priced as the network above it
    return replace(nvlink, levels=tuple(levels), nvlink_level=0), nvlink


@pytest.mark.parametrize("model", ["seed", "megatron"])
def test_a_tray_placement_is_scored_as_the_nvlink_placer_scores_it(model: str) -> None:
    view, nvlink = topologies()
    index = {name: i for i, name in enumerate(nvlink.node_names)}
    job = JobSpec("j", 8, 2, 2, 10.0)
    placement = NVLinkPlacer(ClusterState(nvlink)).place(job, cost_model(model))
    groups = [sorted({nvlink.node_names[nvlink.gpu_node[g]] for g in group}) for group in placement.groups]
    assert tray_cost(view, nvlink, index, job, model, groups) == pytest.approx(placement.cost.total_ms)
    split = [[groups[0][0], "rack-1-tray-0"], *groups[1:]]  # one TP group over two cliques: dearer
    assert tray_cost(view, nvlink, index, job, model, split) > placement.cost.total_ms
    clique_of = {name: name.split("-tray")[0] for name in index}
    assert clique_fit(groups, clique_of) == {
        "tp_groups": 4,
        "tp_groups_in_one_clique": 4,
        "tp_groups_on_own_trays": 4,
        "cliques": 1,
    }
    assert clique_fit(split, clique_of)["tp_groups_in_one_clique"] == 3
    assert clique_fit(split, clique_of)["cliques"] == 2


def test_a_gang_of_one_tray_per_tp_group_is_priced_without_nvlink_between_trays() -> None:
    view, nvlink = topologies()
    index = {name: i for i, name in enumerate(nvlink.node_names)}
    job = JobSpec("j", 4, 1, 2, 10.0)
    same_clique = [["rack-0-tray-0"], ["rack-0-tray-1"]]
    two_cliques = [["rack-0-tray-0"], ["rack-1-tray-0"]]
    cost = tray_cost(view, nvlink, index, job, "seed", same_clique)
    assert cost < tray_cost(view, nvlink, index, job, "seed", two_cliques)
    assert cost > tray_cost(nvlink, nvlink, index, job, "seed", same_clique)  # NVLink would be cheaper


def test_compare_counts_tp_groups_kept_in_one_clique_and_the_table_shows_each_run() -> None:
    gangs = [Gang("a", 8, 1, 2, "seed"), Gang("b", 4, 1, 2, "megatron")]
    row: dict[str, Any] = {"placed": True, "apply_to_bound_s": 1.0, "tp_groups_on_own_trays": 2, "cliques": 1}
    inside = {**row, "comm_ms": 1.0, "step_ms": 5.0, "tp_groups": 2, "tp_groups_in_one_clique": 2}
    split = {**inside, "comm_ms": 3.0, "step_ms": 7.0, "tp_groups_in_one_clique": 1, "cliques": 2}
    runs: dict[str, dict[str, dict[str, Any]]] = {
        "kueue_required": {"a": {"placed": False, "reason": "no clique"}, "b": inside},
        "kueue_preferred": {"a": split, "b": inside},
        "kueue_sliced": {"a": inside, "b": inside},
        "ours": {"a": inside, "b": {**inside, "comm_ms": 0.5, "step_ms": 4.5}},
    }
    result = compare(gangs, runs)
    assert result["kueue_preferred"]["ours_cheaper_on"] == ["a", "b"]
    assert result["kueue_sliced"]["ours_cheaper_on"] == ["b"] and result["kueue_sliced"]["ours_costlier_on"] == []
    assert result["kueue_required"]["we_placed_kueue_did_not"] == ["a"]
    over_trays = result["tp_groups_over_trays"]  # only gang a's TP groups span trays
    assert over_trays["kueue_preferred"] == {"tp_groups": 2, "tp_groups_in_one_clique": 1, "tp_groups_on_own_trays": 2}
    assert over_trays["kueue_required"] == {"tp_groups": 0, "tp_groups_in_one_clique": 0, "tp_groups_on_own_trays": 0}
    measured = {
        "gangs": [{"name": g.name, "shape": g.shape, "gpus": g.gpus, "cost_model": g.cost_model} for g in gangs]
    }
    lines = table({**measured, **runs}).splitlines()
    assert lines[2] == (
        "| a | TP8xPP1xDP2 | 16 (4) | seed | not placed | 3.000, 7.0, 1.0, 1/2 in 1, 2 | 1.000, 5.0, 1.0, 2/2 in 1, 1"
        " | 1.000, 5.0, 1.0, 2/2 in 1, 1 |"
    )

"""``bench kueue`` without a cluster: the JobSet a gang becomes for Kueue TAS, the rank order read back from
its pods, and the comparison and table it reports, on made-up runs."""

from __future__ import annotations

import asyncio
from typing import Any

from paralleljob.devcluster.nodes import LEAF_LABEL
from paralleljob.devtools.bench_kueue import (
    PREFERRED_TOPOLOGY,
    KueuePreferred,
    KueueTAS,
    beyond_rack,
    jobset_manifest,
    kueue_objects,
    rack_free,
)
from paralleljob.devtools.bench_native import GANG_LABEL
from paralleljob.devtools.kueue_report import compare, table
from paralleljob.devtools.native_set import Gang


def test_a_gang_is_one_indexed_job_of_pp_x_dp_pods_of_tp_gpus_queued_with_the_rack_required() -> None:
    gang = Gang("g001", tp=4, pp=2, dp=3, cost_model="seed")
    body = jobset_manifest(gang, "g001-s1")

    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "bench"}
    (replicated,) = body["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 1
    job = replicated["template"]["spec"]
    assert job["completionMode"] == "Indexed" and job["parallelism"] == job["completions"] == 6
    pod = job["template"]
    assert pod["metadata"]["annotations"] == {"kueue.x-k8s.io/podset-required-topology": LEAF_LABEL}
    assert pod["metadata"]["labels"] == {GANG_LABEL: "g001"}
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"nvidia.com/gpu": "4"}  # Kueue counts requests


def test_the_whole_restart_jobset_fails_its_job_on_a_lost_pod_and_recreates_every_pod() -> None:
    gang = Gang("g001", tp=8, pp=2, dp=2, cost_model="seed")
    plain, whole = jobset_manifest(gang, "x"), jobset_manifest(gang, "x", restart_whole=True)
    assert "failurePolicy" not in plain["spec"]
    assert "backoffLimit" not in plain["spec"]["replicatedJobs"][0]["template"]["spec"]  # the Job's default: 6
    assert whole["spec"]["failurePolicy"] == {"maxRestarts": 3}
    assert whole["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] == 0


def test_the_cluster_queue_has_room_for_every_gpu_and_the_flavor_names_the_rack_topology() -> None:
    objects = dict(kueue_objects(["ns", "other"], 512))
    topology = objects["/apis/kueue.x-k8s.io/v1beta2/topologies"]
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [LEAF_LABEL, "kubernetes.io/hostname"]
    assert objects["/apis/kueue.x-k8s.io/v1beta2/resourceflavors"]["spec"]["topologyName"] == "racks"
    queue = objects["/apis/kueue.x-k8s.io/v1beta2/clusterqueues"]["spec"]["resourceGroups"][0]
    assert queue["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "512"}]
    for namespace in ("ns", "other"):
        local = objects[f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues"]
        assert local["spec"] == {"clusterQueue": "bench"} and local["metadata"]["namespace"] == namespace


def test_the_preferred_variant_differs_only_in_its_annotation() -> None:
    gang = Gang("b00", tp=2, pp=4, dp=24, cost_model="seed")
    assert KueuePreferred.topology == PREFERRED_TOPOLOGY != KueueTAS.topology
    preferred, required = jobset_manifest(gang, "x", PREFERRED_TOPOLOGY), jobset_manifest(gang, "x")
    annotations = preferred["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {PREFERRED_TOPOLOGY: LEAF_LABEL}
    del preferred["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"]
    del required["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"]
    assert preferred == required


def test_the_big_gangs_exceed_every_racks_free_gpus_and_take_at_most_three_quarters_of_the_free_ones() -> None:
    used = {n: 8 for n in range(20)} | {n: 4 for n in range(32, 64)}
    assert rack_free(used, 96) == [96, 128, 256]
    gangs = beyond_rack(4, [96, 128, 100], seed=1)
    assert [g.name for g in gangs] == ["b00", "b01", "b02", "b03"]
    assert all(128 < g.gpus <= 243 and g.tp in (2, 4) for g in gangs)
    assert [g.cost_model for g in gangs] == ["seed", "megatron", "seed", "megatron"]
    assert beyond_rack(4, [96, 128, 100], seed=1) == gangs  # seeded
    assert beyond_rack(3, [8, 16, 256], seed=1) == []  # nothing above 256 and at most 210


class Tracker:
    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods


def pod(gang: str, index: int, node: str | None) -> dict[str, Any]:
    labels = {GANG_LABEL: gang, "batch.kubernetes.io/job-completion-index": str(index)}
    return {"name": f"{gang}-{index}", "node": node, "labels": labels}


def test_completion_index_is_the_node_rank_in_megatrons_default_order_and_a_gang_not_whole_has_no_order() -> None:
    gang = Gang("g", tp=8, pp=2, dp=2, cost_model="seed")
    kueue = KueueTAS(None, "kueue", "ns", GANG_LABEL)  # type: ignore[arg-type]  # nodes_of reads no API
    whole = Tracker({f"u{i}": pod("g", i, f"n{3 - i}") for i in range(4)} | {"x": pod("other", 0, "n9")})
    # tp-dp-pp: rank r is replica r % 2 of stage r // 2, i.e. TP group (r % 2) * 2 + r // 2: ranks 0, 2, 1, 3
    assert asyncio.run(kueue.nodes_of(gang, whole)) == ["n3", "n1", "n2", "n0"]  # type: ignore[arg-type]
    partial = Tracker({f"u{i}": pod("g", i, f"n{i}" if i else None) for i in range(4)})
    assert asyncio.run(kueue.nodes_of(gang, partial)) is None  # type: ignore[arg-type]


def test_compare_counts_means_on_gangs_both_placed_and_names_where_either_did_better() -> None:
    gangs = [Gang(n, 2, 1, 1, "seed") for n in ("a", "b", "c")]
    row: dict[str, Any] = {"placed": True, "apply_to_bound_s": 1.0}
    required: dict[str, dict[str, Any]] = {
        "a": {**row, "comm_ms": 2.0, "step_ms": 10.0},
        "b": {**row, "comm_ms": 1.0, "step_ms": 8.0},
        "c": {**row, "comm_ms": 5.0, "step_ms": 9.0},
    }
    preferred: dict[str, dict[str, Any]] = {n: {"placed": False} for n in "abc"}
    ours: dict[str, dict[str, Any]] = {
        "a": {**row, "comm_ms": 1.0, "step_ms": 9.0},
        "b": {**row, "comm_ms": 1.5, "step_ms": 8.5, "apply_to_bound_s": 3.0},
        "c": {"placed": False},
    }
    runs = {"kueue_required": required, "kueue_preferred": preferred, "ours": ours}
    result = compare(gangs, runs)

    req = result["kueue_required"]
    assert req["placed"] == {"kueue": 3, "ours": 2}
    assert req["placed_by_both"] == 2
    assert req["ours_costlier_on"] == ["b"] and req["ours_cheaper_on"] == ["a"]
    assert req["kueue_placed_we_did_not"] == ["c"] and req["we_placed_kueue_did_not"] == []
    assert req["mean_comm_ms_on_common"] == {"kueue": 1.5, "ours": 1.25}
    assert req["mean_step_ms_on_common"] == {"kueue": 9.0, "ours": 8.75}
    assert req["median_apply_to_bound_s"] == {"kueue": 1.0, "ours": 2.0}
    pref = result["kueue_preferred"]
    assert pref["we_placed_kueue_did_not"] == ["a", "b"] and pref["mean_comm_ms_on_common"]["kueue"] is None
    measured = {
        "gangs": [{"name": g.name, "shape": g.shape, "gpus": g.gpus, "cost_model": g.cost_model} for g in gangs],
        **runs,
    }
    lines = table(measured).splitlines()
    assert lines[2] == "| a | TP2xPP1xDP1 | 2 | seed | 2.000, 10.0, 1.0 | not placed | 1.000, 9.0, 1.0 |"
    assert lines[4].endswith("| 5.000, 9.0, 1.0 | not placed | not placed |")

"""The seed API exactly as SPEC section 2 writes it: names, defaults, layouts, costs, failures."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import textwrap

import pytest

from paralleljob import GPU, ClusterTopology, GPUClusterScheduler, Job

SEED_EXAMPLE = textwrap.dedent(
    """
    from paralleljob import GPU, ClusterTopology, Job, GPUClusterScheduler
    topo = ClusterTopology(num_nodes=4)  # 32 GPUs total
    scheduler = GPUClusterScheduler(topo)
    job = Job(job_id="llama-70b", tensor_parallel_size=4, pipeline_parallel_size=2,
              data_parallel_size=2, memory_per_gpu_gb=70.0)          # 16 GPUs
    placement = scheduler.place_job(job)
    assert placement is not None
    for tp_group in placement["tp_groups"]:
        assert len({gpu_id // 8 for gpu_id in tp_group}) == 1, "TP group must be within one node"
    cost = scheduler.estimate_communication_cost(job, placement)
    print(f"TP: {cost['tp_time_ms']:.1f} ms"); print(f"PP: {cost['pp_time_ms']:.1f} ms")
    print(f"DP: {cost['dp_time_ms']:.1f} ms"); print(f"Bottleneck: {cost['bottleneck']}")
    job2 = Job(job_id="llama-7b", tensor_parallel_size=2, pipeline_parallel_size=1,
               data_parallel_size=4, memory_per_gpu_gb=30.0, num_params_billions=7.0)   # 8 GPUs
    assert scheduler.place_job(job2) is not None
    for a in scheduler.handle_gpu_failure(failed_gpu_id=0):
        print(f"Job {a['job_id']}: {a['action']}")
    """
)

# Hand-computed with the seed formulas: S = 2048 * 4096 * 2 bytes, 70e9 * 2 bytes of gradients.
ACT = 2048 * 4096 * 2
TP_MS = 2 * 3 / 4 * ACT / 600e9 * 1e3
PP_CROSS_MS = ACT / 50e9 * 1e3
PP_NVLINK_MS = ACT / 600e9 * 1e3
DP_NVLINK_MS = 140e9 / 600e9 * 1e3
DP_CROSS_MS = 140e9 / 50e9 * 1e3


def llama70b() -> Job:
    return Job("llama-70b", 4, 2, 2, 70.0)


def test_seed_example_runs_unchanged():
    result = subprocess.run([sys.executable, "-c", SEED_EXAMPLE], capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert lines[:4] == ["TP: 0.0 ms", "PP: 0.3 ms", "DP: 233.3 ms", "Bottleneck: dp"]
    assert "Job llama-70b: rescheduled" in lines


def test_dataclass_fields_and_defaults_are_the_seeds():
    def shape(cls):
        return [(f.name, f.default) for f in dataclasses.fields(cls)]

    assert shape(GPU) == [
        ("gpu_id", dataclasses.MISSING),
        ("node_id", dataclasses.MISSING),
        ("memory_gb", 80),
        ("memory_used_gb", 0.0),
        ("is_healthy", True),
    ]
    assert shape(ClusterTopology)[:4] == [
        ("num_nodes", dataclasses.MISSING),
        ("gpus_per_node", 8),
        ("intra_node_bw_gbps", 600.0),
        ("inter_node_bw_gbps", 50.0),
    ]
    assert shape(Job)[:10] == [
        ("job_id", dataclasses.MISSING),
        ("tensor_parallel_size", dataclasses.MISSING),
        ("pipeline_parallel_size", dataclasses.MISSING),
        ("data_parallel_size", dataclasses.MISSING),
        ("memory_per_gpu_gb", dataclasses.MISSING),
        ("hidden_dim", 4096),
        ("seq_len", 2048),
        ("micro_batch_size", 1),
        ("num_params_billions", 70.0),
        ("dtype_bytes", 2),
    ]
    # every extra field is optional
    assert all(f.default is not dataclasses.MISSING for f in dataclasses.fields(Job)[5:])


def test_gpus_are_indexed_by_global_id():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=3, gpus_per_node=4))
    assert [(g.gpu_id, g.node_id) for g in scheduler.gpus] == [(i, i // 4) for i in range(12)]


def test_bandwidth_between():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=2))
    assert scheduler.bandwidth_between(3, 3) == math.inf
    assert scheduler.bandwidth_between(0, 7) == 600.0
    assert scheduler.bandwidth_between(0, 8) == 50.0
    with pytest.raises(ValueError, match="unknown GPU id 16"):
        scheduler.bandwidth_between(0, 16)


def test_multi_level_bandwidth_uses_lowest_shared_level():
    topo = ClusterTopology(num_nodes=4, levels=[("rack", 2, 200.0)])
    scheduler = GPUClusterScheduler(topo)
    assert scheduler.bandwidth_between(0, 8) == 200.0  # nodes 0 and 1 share rack 0
    assert scheduler.bandwidth_between(0, 16) == 50.0  # different racks


def test_seed_optimum_puts_stages_not_replicas_on_nodes():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=4))
    placement = scheduler.place_job(llama70b())
    assert placement is not None
    groups = placement["tp_groups"]
    node = [g[0] // 8 for g in groups]
    # stage 0 of both replicas on one node, stage 1 of both on another
    assert node[0] == node[2] and node[1] == node[3] and node[0] != node[1]
    cost = scheduler.estimate_communication_cost(llama70b(), placement)
    assert cost["total_ms"] == pytest.approx(TP_MS + PP_CROSS_MS + DP_NVLINK_MS)
    assert round(cost["total_ms"], 1) == 233.7
    assert cost["bottleneck"] == "dp"


def test_one_replica_per_node_costs_2800_ms():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=4))
    placement = {"tp_groups": [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]}
    cost = scheduler.estimate_communication_cost(llama70b(), placement)
    assert cost["tp_time_ms"] == pytest.approx(TP_MS)
    assert cost["pp_time_ms"] == pytest.approx(PP_NVLINK_MS)
    assert cost["dp_time_ms"] == pytest.approx(DP_CROSS_MS)
    assert round(cost["total_ms"], 1) == 2800.1


def test_placement_layout_is_consistent():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=4))
    job = Job("j", 2, 3, 2, 10.0)
    p = scheduler.place_job(job)
    assert p is not None
    tp, pp, dp = 2, 3, 2
    assert len(p["tp_groups"]) == pp * dp and all(len(g) == tp for g in p["tp_groups"])
    for s in range(pp):
        assert p["pp_stages"][s] == [g for d in range(dp) for g in p["tp_groups"][d * pp + s]]
    for d in range(dp):
        assert p["dp_replicas"][d] == [g for s in range(pp) for g in p["tp_groups"][d * pp + s]]
    used = [g for group in p["tp_groups"] for g in group]
    assert len(set(used)) == len(used) == tp * pp * dp
    assert all(scheduler.gpus[g].memory_used_gb == 10.0 for g in used)


def snapshot(scheduler: GPUClusterScheduler):
    return ([(g.memory_used_gb, g.is_healthy) for g in scheduler.gpus], scheduler.list_jobs())


@pytest.mark.parametrize(
    "job",
    [
        Job("tp-too-big", 16, 1, 1, 10.0),  # TP > GPUs per node
        Job("too-many", 8, 2, 3, 10.0),  # 48 GPUs on a 32-GPU cluster
        Job("too-much-memory", 1, 1, 1, 81.0),
    ],
    ids=lambda j: j.job_id,
)
def test_unplaceable_jobs_return_none_and_change_nothing(job):
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=4))
    assert scheduler.place_job(Job("resident", 2, 1, 2, 10.0)) is not None
    before = snapshot(scheduler)
    assert scheduler.place_job(job) is None
    assert snapshot(scheduler) == before
    assert scheduler.last_refusal is not None and scheduler.last_refusal.reasons


def test_a_gpu_serves_one_job_even_when_memory_would_fit():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=1, gpus_per_node=2))
    assert scheduler.place_job(Job("a", 1, 1, 2, 10.0)) is not None
    assert scheduler.place_job(Job("b", 1, 1, 1, 10.0)) is None


def test_release_frees_gpus_and_memory():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=2))
    assert scheduler.place_job(Job("a", 8, 2, 1, 70.0)) is not None
    assert scheduler.place_job(Job("b", 1, 1, 1, 1.0)) is None
    assert scheduler.release_job("a") is True
    assert all(g.memory_used_gb == 0.0 for g in scheduler.gpus)
    assert scheduler.release_job("a") is False
    assert scheduler.place_job(Job("b", 1, 1, 1, 1.0)) is not None


def test_gpu_failure_on_unused_or_failed_gpu_returns_empty():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=2))
    assert scheduler.handle_gpu_failure(5) == []
    assert scheduler.gpus[5].is_healthy is False
    assert scheduler.handle_gpu_failure(5) == []


def test_gpu_failure_reschedules_and_never_reuses_the_failed_gpu():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=4))
    old = scheduler.place_job(llama70b())
    assert old is not None
    failed = old["tp_groups"][0][0]
    (action,) = scheduler.handle_gpu_failure(failed_gpu_id=failed)
    assert action["job_id"] == "llama-70b" and action["action"] == "rescheduled"
    assert action["old_placement"] == old
    new = action["new_placement"]
    assert failed not in [g for group in new["tp_groups"] for g in group]
    assert scheduler.list_jobs()["llama-70b"] == new
    assert scheduler.estimate_communication_cost(llama70b(), new)["total_ms"] == pytest.approx(
        TP_MS + PP_CROSS_MS + DP_NVLINK_MS
    )
    # untouched stage stays where it was: as few ranks as possible move
    assert new["pp_stages"][1] == old["pp_stages"][1]


def test_gpu_failure_kills_a_job_that_no_longer_fits():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=1))
    assert scheduler.place_job(Job("whole-node", 8, 1, 1, 10.0)) is not None
    (action,) = scheduler.handle_gpu_failure(3)
    assert action["action"] == "killed" and action["new_placement"] is None
    assert scheduler.list_jobs() == {}
    assert sum(g.memory_used_gb for g in scheduler.gpus) == 0.0


def test_repaired_gpu_is_used_again():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=1))
    scheduler.handle_gpu_failure(0)
    assert scheduler.place_job(Job("all", 8, 1, 1, 1.0)) is None
    assert scheduler.mark_gpu_healthy(0) is True
    assert scheduler.mark_gpu_healthy(0) is False
    assert scheduler.place_job(Job("all", 8, 1, 1, 1.0)) is not None


def test_minimal_recovery_moves_only_the_broken_group():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=4), recovery="minimal")
    old = scheduler.place_job(Job("j", 2, 2, 2, 10.0))
    assert old is not None
    failed = old["tp_groups"][0][0]
    (action,) = scheduler.handle_gpu_failure(failed)
    new = action["new_placement"]
    changed = [i for i, (a, b) in enumerate(zip(old["tp_groups"], new["tp_groups"], strict=True)) if a != b]
    assert changed == [0]
    assert action["cost_after_ms"] >= action["cost_before_ms"] - 1e-9


@pytest.mark.parametrize(
    ("pp", "sizes", "expected"),
    [(1, None, 0), (2, None, 1), (5, None, 2), (4, [4.0, 1.0, 1.0, 3.0], 2), (4, [1.0, 5.0, 5.0, 1.0], 3)],
)
def test_checkpointable_boundary(pp, sizes, expected):
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=1))
    job = Job("j", 1, pp, 1, 1.0, stage_activation_sizes=sizes)
    assert scheduler.find_checkpointable_boundary(job) == expected


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (Job("j", 0, 1, 1, 1.0), "tensor_parallel_size must be >= 1"),
        (Job("j", 1, -2, 1, 1.0), "pipeline_parallel_size must be >= 1"),
        (Job("j", 1, 1, 0, 1.0), "data_parallel_size must be >= 1"),
        (Job("j", 1, 1, 1, -5.0), "memory_per_gpu_gb must be >= 0"),
        (Job("j", 1, 1, 1, float("nan")), "memory_per_gpu_gb must be a finite number"),
        (Job("", 1, 1, 1, 1.0), "job_id must be a non-empty string"),
        (Job("j", 1, 1, 1, 1.0, hidden_dim=0), "hidden_dim must be >= 1"),
        (Job("j", 1.5, 1, 1, 1.0), "tensor_parallel_size must be an integer"),  # type: ignore[arg-type]
    ],
)
def test_bad_jobs_raise_clear_value_errors_and_change_nothing(job, message):
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=2))
    before = snapshot(scheduler)
    with pytest.raises(ValueError, match=message):
        scheduler.place_job(job)
    assert snapshot(scheduler) == before


def test_bad_gpu_ids_and_placements_raise_value_errors():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=2))
    for bad in (-1, 16, "3", True):
        with pytest.raises(ValueError):
            scheduler.handle_gpu_failure(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            scheduler.mark_gpu_healthy(bad)  # type: ignore[arg-type]
    assert all(g.is_healthy for g in scheduler.gpus)
    job = Job("j", 2, 1, 1, 1.0)
    for bad_placement in ({}, {"tp_groups": [[0]]}, {"tp_groups": [[0, 99]]}, {"tp_groups": [[0, 1], [2, 3]]}):
        with pytest.raises(ValueError):
            scheduler.estimate_communication_cost(job, bad_placement)


def test_bad_topologies_raise_value_errors():
    for topo in (ClusterTopology(num_nodes=0), ClusterTopology(num_nodes=2, gpus_per_node=0)):
        with pytest.raises(ValueError):
            GPUClusterScheduler(topo)
    with pytest.raises(ValueError, match="recovery"):
        GPUClusterScheduler(ClusterTopology(num_nodes=1), recovery="sometimes")
    with pytest.raises(ValueError, match="cost model"):
        GPUClusterScheduler(ClusterTopology(num_nodes=1), cost_model="magic")


def test_placing_the_same_job_twice_is_refused():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=2))
    assert scheduler.place_job(Job("j", 1, 1, 1, 1.0)) is not None
    with pytest.raises(ValueError, match="already placed"):
        scheduler.place_job(Job("j", 1, 1, 1, 1.0))


def test_megatron_cost_model_is_selectable_and_explains_itself():
    scheduler = GPUClusterScheduler(ClusterTopology(num_nodes=4), cost_model="megatron")
    placement = scheduler.place_job(llama70b())
    assert placement is not None
    cost = scheduler.estimate_communication_cost(llama70b(), placement)
    assert cost["total_ms"] == pytest.approx(cost["tp_time_ms"] + cost["pp_time_ms"] + cost["dp_time_ms"])
    assert any("proven optimal" in line for line in scheduler.explain("llama-70b"))

"""The simulator's step communication is the calibrated collective model applied to the actual layout.

Each figure is checked against ``core.timing.collectives`` directly (the model ``tests/sim/test_calibration.py``
pins to published NCCL-tests runs) and against the cost model's slowest-link price, so a step time that
slid back to the placer's price fails here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paralleljob.core.job import JobSpec, ModelShape
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.timing.collectives import GB200_NVL72, HGX_H100, allreduce_ms
from paralleljob.core.timing.cost import MegatronCostModel, SeedCostModel
from paralleljob.core.timing.stepcomm import StepComm, one_domain_comm
from paralleljob.core.topology import Topology

MEGATRON = MegatronCostModel()
LLAMA_8B = ModelShape(num_params_billions=8.0, seq_len=4096, hidden_dim=4096)


def node_gpus(topology: Topology, node: int) -> tuple[int, ...]:
    first = topology.node_first_gpu[node]
    return tuple(range(first, first + topology.node_gpu_count[node]))


def test_tp8_in_one_hgx_node_is_nvls_as_calibrated() -> None:
    job = JobSpec("j", 8, 1, 1, 0.0, LLAMA_8B)
    comm = StepComm(Topology.uniform(2)).step(job, [node_gpus(Topology.uniform(2), 0)], MEGATRON)
    count, size = MEGATRON.tp_allreduces(job)
    ms, algorithm = allreduce_ms(HGX_H100, size, 8)
    assert algorithm == "nvls"
    assert comm.tp_ms == pytest.approx(count * ms, rel=1e-12)
    assert comm.tp_ms > 1.2 * MEGATRON.tp_ms(job, 600.0)  # the placer's 600 GB/s is 1.25-1.6x too fast


def test_groups_inside_one_nvl72_rack_use_the_rack_fabric() -> None:
    topology = nvl72_topology(2)
    tp8 = JobSpec("tp", 8, 1, 1, 0.0, LLAMA_8B)
    groups = [node_gpus(topology, 0) + node_gpus(topology, 1)]  # two trays of rack 0
    count, size = MEGATRON.tp_allreduces(tp8)
    assert StepComm(topology).step(tp8, groups, MEGATRON).tp_ms == pytest.approx(
        count * allreduce_ms(GB200_NVL72, size, 8)[0], rel=1e-12
    )
    dp72 = JobSpec("dp", 1, 1, 72, 0.0, LLAMA_8B)
    rack = [(g,) for n in range(18) for g in node_gpus(topology, n)]
    _, shard = MEGATRON.dp_allreduces(dp72)
    ms, algorithm = allreduce_ms(GB200_NVL72, shard, 72)
    assert StepComm(topology).step(dp72, rack, MEGATRON).dp_ms == pytest.approx(ms, rel=1e-12)
    assert algorithm == "nvls"


def test_a_dp_group_of_two_whole_racks_is_the_nvls_tree_not_the_network() -> None:
    topology = nvl72_topology(2)
    job = JobSpec("dp", 1, 1, 144, 0.0, LLAMA_8B)
    groups = [(g,) for n in range(36) for g in node_gpus(topology, n)]
    _, shard = MEGATRON.dp_allreduces(job)
    ms, algorithm = allreduce_ms(GB200_NVL72, shard, 144)
    assert algorithm == "tree"
    comm = StepComm(topology).step(job, groups, MEGATRON)
    assert comm.dp_ms == pytest.approx(ms, rel=1e-12)
    assert comm.dp_ms < MEGATRON.dp_ms(job, 50.0) / 5  # the slowest-link price is 5-16x too pessimistic


def test_cross_node_dp_ring_runs_at_the_nic_of_the_level_it_crosses() -> None:
    # Four nodes, two racks of two under a 2:1 spine (25 GB/s per GPU); one DP member per node.
    topology = Topology.uniform(4, levels=[("rack", 2, 50.0)], inter_node_bw_gbps=25.0)
    job = JobSpec("dp", 1, 1, 4, 0.0, LLAMA_8B)
    timing = StepComm(topology)
    _, shard = MEGATRON.dp_allreduces(job)
    in_rack = timing.step(replace(job, dp=2), [(0,), (8,)], MEGATRON).dp_ms
    over_spine = timing.step(job, [(0,), (8,), (16,), (24,)], MEGATRON).dp_ms
    assert in_rack == pytest.approx(allreduce_ms(HGX_H100, shard, 2, per_domain=1)[0], rel=1e-12)
    spine = replace(HGX_H100, nic_gbps=25.0)
    assert over_spine == pytest.approx(allreduce_ms(spine, shard, 4, per_domain=1)[0], rel=1e-12)
    # one member per node: the calibrated ring is the cost model's at 95% of the link (47.5 of 50 GB/s)
    assert in_rack == pytest.approx(MEGATRON.dp_ms(replace(job, dp=2), 50.0) / 0.95, rel=1e-3)


def test_pipeline_boundaries_move_at_nvlink_or_a_nic_effective_rate() -> None:
    topology = Topology.uniform(2)
    job = JobSpec("pp", 4, 2, 1, 0.0, LLAMA_8B)
    timing = StepComm(topology)
    inside = timing.step(job, [(0, 1, 2, 3), (4, 5, 6, 7)], MEGATRON).pp_ms
    across = timing.step(job, [(0, 1, 2, 3), (8, 9, 10, 11)], MEGATRON).pp_ms
    assert inside == pytest.approx(MEGATRON.pp_ms(job, [HGX_H100.nvlink_effective]), rel=1e-12)
    assert across == pytest.approx(MEGATRON.pp_ms(job, [0.95 * 50.0]), rel=1e-12)


def test_a_job_no_node_holds_is_measured_against_one_wide_domain() -> None:
    job = JobSpec("big", 16, 1, 1, 0.0, LLAMA_8B)
    count, size = SeedCostModel().tp_allreduces(job)
    wide = replace(HGX_H100, domain_gpus=16)
    assert one_domain_comm(job, SeedCostModel()).tp_ms == pytest.approx(count * allreduce_ms(wide, size, 16)[0])

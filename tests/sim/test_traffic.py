"""Cross-level bytes: what each placement's steps move over each topology level, pinned by hand."""

from __future__ import annotations

import pytest

from paralleljob.core.job import JobSpec, ModelShape
from paralleljob.core.timing.collectives import HGX_H100, allreduce_ms
from paralleljob.core.timing.cost import SeedCostModel
from paralleljob.core.timing.traffic import level_bytes_per_step
from paralleljob.core.topology import Topology
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import SimResult, Simulation
from paralleljob.sim.workload.trace import TraceJob

H100_BF16_ACHIEVED = 989e12 * 0.40


def run(trace: list[TraceJob], **config: object) -> tuple[Simulation, SimResult]:
    simulation = Simulation(Topology.uniform(2), trace, SimConfig(check_invariants=True, **config))  # type: ignore[arg-type]
    return simulation, simulation.run()


def test_split_tp_group_puts_its_bytes_above_the_node_under_first_fit_and_inside_it_under_ours() -> None:
    # J1 takes GPUs 0-5; first-fit cuts J2's TP4 group over GPUs 6, 7 (node 0) and 8, 9 (node 1).
    trace = [TraceJob("J1", 0, 10_000, 6, "t", (1, 1, 6)), TraceJob("J2", 1, 1000, 4, "t", (4, 1, 1))]
    spec = JobSpec("J2", 4, 1, 1, 0.0, ModelShape(num_params_billions=8.0))
    m = spec.model
    size = m.seq_len * m.hidden_dim * m.dtype_bytes * m.micro_batch_size  # one micro-batch's activations
    allreduces = 4 * m.layers() * 4  # 4 micro-batches x layers x 4 all-reduces per layer (Megatron)
    per_step = 4 * (2 * 3 / 4 * size) * allreduces  # 4 members, ring volume 2(n-1)/n x S each
    compute = 6 * 8e9 * (4 * 2048) / 4 / H100_BF16_ACHIEVED * 1e3
    ideal_tp_ms = allreduces * allreduce_ms(HGX_H100, size, 4)[0]  # the calibrated TP4 in one node
    steps = 1000 * 1e3 / (compute + ideal_tp_ms)  # calibrated on the ideal
    first_fit, ff_result = run(trace, policy="first-fit", cost_model="megatron")
    ours, ours_result = run(trace, policy="ours", cost_model="megatron")
    assert first_fit.jobs["J2"].level_bytes == pytest.approx([0.0, per_step * steps], rel=1e-9)
    assert ours.jobs["J2"].level_bytes == pytest.approx([per_step * steps, 0.0], rel=1e-9)
    # J1's DP ring stays in node 0, so the run's bytes above the node are J2's alone
    assert ff_result.metrics["bytes_by_level"]["cluster"] == pytest.approx(per_step * steps, rel=1e-9)
    assert ours_result.metrics["bytes_by_level"]["cluster"] == 0.0


def test_pp_and_dp_bytes_go_to_the_level_their_pairs_and_rings_span() -> None:
    # 2 racks of 2 nodes of 2 GPUs. TP2 x PP2 x DP2: replica 0 in rack 0 (nodes 0, 1), replica 1 in rack 1.
    topo = Topology.uniform(4, 2, levels=[("rack", 2, 100.0)])
    job = JobSpec("j", 2, 2, 2, 0.0, ModelShape(num_params_billions=1.0))
    groups = [(0, 1), (2, 3), (4, 5), (6, 7)]  # [d * pp + p]
    seed = SeedCostModel()
    act = job.model.seq_len * job.model.hidden_dim * job.model.dtype_bytes
    tp_group = 2 * (2 * 1 / 2 * act)  # per step: one all-reduce of the activations, 2 members
    pp_pair = act * job.model.micro_batch_size  # one send per boundary per step
    dp_group = 2 * (2 * 1 / 2 * 1e9 * job.model.dtype_bytes)  # the seed model: the whole model per DP group
    node, rack, cluster = level_bytes_per_step(topo, job, groups, seed)
    assert node == pytest.approx(4 * tp_group)
    assert rack == pytest.approx(2 * 2 * pp_pair)  # 2 replicas x 2 TP ranks cross nodes inside a rack
    assert cluster == pytest.approx(2 * 2 * dp_group)  # pp x tp DP rings span the racks

"""The step-time model: compute from FLOPs plus the communication of the actual placement (the cost model's
collectives timed by the calibrated ``core.timing.collectives``), calibrated so that the ideal placement takes
exactly the trace's duration."""

from __future__ import annotations

import pytest

from paralleljob.core.job import JobSpec, ModelShape
from paralleljob.core.timing.collectives import HGX_H100, allreduce_ms
from paralleljob.core.timing.cost import MegatronCostModel, SeedCostModel
from paralleljob.core.timing.steptime import StepTimeModel
from paralleljob.core.topology import Topology
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob

H100_BF16_ACHIEVED = 989e12 * 0.40  # FLOP/s per GPU at the default 40% MFU


def run(trace: list[TraceJob], **config: object) -> Simulation:
    simulation = Simulation(Topology.uniform(2), trace, SimConfig(check_invariants=True, **config))  # type: ignore[arg-type]
    simulation.run()
    return simulation


def finished(simulation: Simulation, job_id: str) -> float:
    job = simulation.jobs[job_id]
    assert job.finished is not None
    return job.finished - job.trace.submit_s


def test_compute_is_six_flops_per_parameter_per_token_over_the_shard() -> None:
    job = JobSpec("j", 4, 2, 8, 0.0, ModelShape(num_params_billions=16.0))
    tokens = 4 * 2 * 1 * 2048  # 4 micro-batches per stage (Megatron's default), 1 x 2048 tokens each
    expected_ms = 6 * 16e9 * tokens / (4 * 2) / H100_BF16_ACHIEVED * 1e3
    assert StepTimeModel().compute_ms(job) == pytest.approx(expected_ms)


def test_first_fit_split_dp_ring_slows_the_job_by_the_calibrated_milliseconds() -> None:
    # J1 takes GPUs 0-6; first-fit gives J2 (DP2, 2B parameters) GPU 7 and GPU 8: its gradient all-reduce of
    # 4 GB is a ring over one NIC (47.5 GB/s effective: 84.2 ms) instead of NVLink inside the node (370 GB/s
    # effective: 10.8 ms), as core.timing.collectives times them; compute 248.5 ms. The cost model's own price
    # (50 and 600 GB/s: 80 and 6.67 ms) would give 1.287, so the figure fails if the step time stops
    # resting on the calibrated model.
    trace = [TraceJob("J1", 0, 10_000, 7, "t", (1, 1, 7)), TraceJob("J2", 1, 1000, 2, "t", (1, 1, 2))]
    size = 2e9 * 2  # the seed model all-reduces the whole model in BF16
    compute = 6 * 2e9 * (4 * 2048) / H100_BF16_ACHIEVED * 1e3
    split = allreduce_ms(HGX_H100, size, 2, per_domain=1)[0]
    ideal = allreduce_ms(HGX_H100, size, 2)[0]
    expected = (compute + split) / (compute + ideal)
    first_fit = run(trace, policy="first-fit")
    assert first_fit.jobs["J2"].first_slowdown == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx((248.49 + 84.21) / (248.49 + 10.81), rel=1e-3)
    spec = JobSpec("J2", 1, 1, 2, 0.0, ModelShape(num_params_billions=2.0))
    seed = SeedCostModel()
    assert expected != pytest.approx((compute + seed.dp_ms(spec, 50.0)) / (compute + seed.dp_ms(spec, 600.0)))
    assert finished(first_fit, "J2") == pytest.approx(1000 * expected, rel=1e-9)
    assert finished(run(trace, policy="ours"), "J2") == 1000.0  # the ideal placement: the trace's duration


def test_first_fit_split_tp_group_costs_what_nccl_would_take() -> None:
    # J1 takes GPUs 0-5; first-fit cuts J2's TP4 group over GPUs 6, 7 (node 0) and 8, 9 (node 1): each of its
    # 640 per-layer all-reduces (16 MiB) is a ring over two NICs (95 GB/s) instead of NVLink in one node.
    trace = [TraceJob("J1", 0, 10_000, 6, "t", (1, 1, 6)), TraceJob("J2", 1, 1000, 4, "t", (4, 1, 1))]
    spec = JobSpec("J2", 4, 1, 1, 0.0, ModelShape(num_params_billions=8.0))
    megatron = MegatronCostModel()
    count, size = megatron.tp_allreduces(spec)
    compute = 6 * 8e9 * (4 * 2048) / 4 / H100_BF16_ACHIEVED * 1e3
    split = count * allreduce_ms(HGX_H100, size, 4, per_domain=2)[0]
    ideal = count * allreduce_ms(HGX_H100, size, 4)[0]
    expected = (compute + split) / (compute + ideal)
    first_fit = run(trace, policy="first-fit", cost_model="megatron")
    assert first_fit.jobs["J2"].tp_groups_split == 1
    assert first_fit.jobs["J2"].first_slowdown == pytest.approx(expected, rel=1e-9)
    assert (split, ideal) == (pytest.approx(176.45, rel=1e-3), pytest.approx(50.44, rel=1e-3))
    assert expected > 1.4  # a split TP group is expensive, as practitioners expect
    assert finished(first_fit, "J2") == pytest.approx(1000 * expected, rel=1e-9)


def test_overlap_hides_communication_and_the_fraction_model_is_still_there() -> None:
    job = JobSpec("j", 1, 1, 2, 0.0, ModelShape(num_params_billions=2.0))
    exposed = StepTimeModel().slowdown(job, 80.0, 10.0)
    hidden = StepTimeModel(overlap=0.5).slowdown(job, 80.0, 10.0)
    assert 1.0 < hidden < exposed
    assert StepTimeModel().slowdown(job, 5.0, 10.0) == 1.0  # never faster than the trace
    assert StepTimeModel("fraction", comm_fraction=0.1).slowdown(job, 120.0, 10.0) == pytest.approx(2.1)
    with pytest.raises(ValueError, match="unknown step model"):
        StepTimeModel("magic")


def test_steps_are_calibrated_on_the_ideal_placement() -> None:
    job = JobSpec("j", 1, 1, 2, 0.0, ModelShape(num_params_billions=2.0))
    model = StepTimeModel()
    steps = model.steps(job, 3600.0, 10.0)
    assert steps * model.step_ms(job, 10.0) == pytest.approx(3.6e6)

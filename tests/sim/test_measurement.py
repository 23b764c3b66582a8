"""Measurement faults found in review (issue 15), each pinned: the cluster does not change with the job seed,
--days counts what it replays, empty sets are n/a rather than 0, rejected jobs are reported, every policy
sees the same failures over the same horizon, allocation is measured over the busy period, fragmentation
is a share of the cluster, and a pass does not ask the placer about jobs that cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paralleljob.cli import main
from paralleljob.core.cluster import ClusterState
from paralleljob.core.failure.repair import FailurePolicy
from paralleljob.core.placing.baselines import FirstFitPlacer
from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.failures import Cause, Scope
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob


def job(job_id: str, submit: float, duration: float, shape: tuple[int, int, int]) -> TraceJob:
    return TraceJob(job_id, submit, duration, shape[0] * shape[1] * shape[2], "t", shape)


def run(topology: Topology, trace: list[TraceJob], **config: object) -> Simulation:
    simulation = Simulation(topology, trace, SimConfig(check_invariants=True, **config))  # type: ignore[arg-type]
    simulation.run()
    return simulation


def simulate(tmp_path: Path, trace_text: str, *extra: str) -> dict[str, object]:
    trace = tmp_path / "trace.csv"
    trace.write_text(trace_text)
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(trace), "--out", str(out), "--no-plots", *extra]) == 0
    result: dict[str, object] = json.loads((out / "metrics.json").read_text())
    result["report"] = (out / "report.md").read_text()
    return result


def test_the_job_seed_does_not_change_a_sampled_cluster(traces: Path, tmp_path: Path) -> None:
    sizes = set()
    for seed in ("1", "2", "3"):
        args = [
            "simulate", "--trace", str(traces / "alibaba2023_openb_pods.csv"), "--max-jobs", "20",
            "--node-list", str(traces / "alibaba2023_openb_gpu_nodes.csv"), "--node-sample", "100",
            "--seed", seed, "--no-plots", "--out", str(tmp_path / seed),
        ]  # fmt: skip
        assert main(args) == 0
        sizes.add(json.loads((tmp_path / seed / "metrics.json").read_text())["cluster"]["gpus"])
    assert len(sizes) == 1


def test_days_reports_the_jobs_it_replays(tmp_path: Path) -> None:
    metrics = simulate(tmp_path, "submit_s,duration_s,num_gpus\n0,10,1\n100,10,1\n200000,10,1\n", "--nodes", "1",
                       "--days", "1")  # fmt: skip
    assert metrics["trace"] == {"file": "trace.csv", "format": "generic", "jobs": 2, "jobs_read": 3}


def test_a_horizon_before_every_submit_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("submit_s,duration_s,num_gpus\n90000,10,1\n")
    argv = ["simulate", "--trace", str(trace), "--nodes", "1", "--days", "1", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "no job of the trace is submitted within --days 1" in capsys.readouterr().err


def test_empty_results_are_not_zeros_and_rejections_are_reported(tmp_path: Path) -> None:
    # TP 16 never fits 8-GPU nodes: the only job is rejected; no JCT exists, so none is printed as 0.
    metrics = simulate(tmp_path, "submit_s,duration_s,num_gpus,tp,pp,dp\n0,10,16,16,1,1\n", "--nodes", "2")
    ours = metrics["policies"]["ours"]  # type: ignore[index]
    assert ours["jobs"]["rejected"] == 1
    assert ours["jct_s"] == {"count": 0, "mean": None, "p50": None, "p99": None, "max": None}
    assert ours["makespan_s"] is None
    report = str(metrics["report"])
    assert "| mean JCT (h) | n/a |" in report
    assert "Rejected jobs are not in the JCT figures** (ours 1 rejected" in report


def test_every_policy_sees_the_same_failures_over_the_same_horizon() -> None:
    # First-fit splits J2 over two nodes and runs it 3x longer; failures must not keep coming for it alone.
    causes = (Cause("sw", 1, Scope.SOFTWARE),)
    trace = [job("J1", 0, 50_000, (1, 1, 7)), job("J2", 1, 50_000, (1, 1, 2))]
    tallies = {}
    for policy in ("ours", "first-fit"):
        simulation = run(
            Topology.uniform(2), trace, policy=policy, failure_rate=5_000.0, causes=causes, seed=4,
            step_model="fraction", comm_fraction=0.5, failure_policy=FailurePolicy(max_restarts=1_000),
        )  # fmt: skip  (both must run to the end, however often they restart)
        finish = max(j.finished or 0.0 for j in simulation.jobs.values())
        tallies[policy] = (simulation.tally.injected, simulation.failure_horizon, finish)
    assert tallies["ours"][:2] == tallies["first-fit"][:2]
    assert tallies["ours"][1] == 50_001.0  # the trace's span: last submit + duration
    assert tallies["first-fit"][2] > tallies["ours"][2] * 1.2  # it did run longer
    assert tallies["ours"][0] > 3


def test_allocation_over_the_busy_period_excludes_the_drain() -> None:
    # A (4 of 8 GPUs) runs 0..100; B (8 GPUs) arrives at 100, the last submit, and runs 1000 s alone.
    simulation = run(Topology.uniform(1), [job("A", 0, 100, (4, 1, 1)), job("B", 100, 1000, (8, 1, 1))])
    metrics = simulation._result().metrics
    assert metrics["gpu_allocation_busy_period"] == pytest.approx(0.5)
    assert metrics["busy_period_s"] == 100.0
    assert metrics["gpu_allocation"] == pytest.approx((4 * 100 + 8 * 1000) / (8 * 1100))
    assert metrics["makespan_s"] == 1100.0


def test_fragmentation_is_a_share_of_the_cluster_not_of_the_free_gpus() -> None:
    # 8 + 7 GPUs on two 8-GPU nodes: one GPU stranded. As a share of free GPUs that read 100%.
    simulation = run(Topology.uniform(2), [job("A", 0, 100, (8, 1, 1)), job("B", 0, 100, (7, 1, 1))], samples=4)
    assert max(simulation.series.fragmentation) == pytest.approx(1 / 16)
    assert min(simulation.series.free) == pytest.approx(1 / 16)


class CountingPlacer:
    def __init__(self, inner: object) -> None:
        self.inner, self.calls = inner, 0

    def place(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return self.inner.place(*args, **kwargs)  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", ["ours", "first-fit", "best-fit", "volcano"])
def test_a_pass_does_not_ask_the_placer_about_jobs_larger_than_what_is_free(policy: str) -> None:
    # A fills the cluster for 1000 s; 50 more jobs wait. Passes happen at every arrival, yet the placer is
    # asked only for A and then once per job when A is gone.
    trace = [job("A", 0, 1000, (8, 1, 2))] + [job(f"W{i:02d}", 1 + i, 10, (1, 1, 2)) for i in range(50)]
    simulation = Simulation(Topology.uniform(2), trace, SimConfig(policy=policy, queue="fifo-skip"))
    counter = CountingPlacer(simulation.placer)
    simulation.placer = counter  # type: ignore[assignment]
    simulation.run()
    assert counter.calls == 51
    assert all(j.finished is not None for j in simulation.jobs.values())


def test_first_fit_computes_cluster_capacity_once_per_memory_size() -> None:
    placer = FirstFitPlacer(ClusterState(Topology.uniform(4)))
    assert placer.capacity(40.0) == 32 and placer.capacity(100.0) == 0
    placer.state.topology = Topology.uniform(1)  # a stale topology would show: the cache answers
    assert placer.capacity(40.0) == 32


def test_jobs_are_counted_by_the_level_their_placement_spans() -> None:
    # Two racks of one node each: an 8-GPU job fits a node; a 16-GPU job must cross racks.
    topology = Topology.uniform(2, levels=[("rack", 1, 100.0)])
    simulation = run(topology, [job("A", 0, 10, (8, 1, 1)), job("B", 20, 10, (8, 1, 2)), job("C", 40, 10, (1, 1, 1))])
    assert simulation._result().metrics["multi_gpu_jobs_by_span_level"] == {"node": 1, "rack": 0, "cluster": 1}

"""Elastic jobs in the simulator: a higher-priority rigid job takes a growth replica (highest first) instead
of waiting, through the built-in FIFO queue and through the core queue policies' pass alike; a broken replica
with no spare is dropped (``tests/test_elastic_two_shells.py`` compares that with the operator)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from paralleljob.cli import main
from paralleljob.core.topology import Topology
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob


def _simulation(queue: str) -> Simulation:
    # An elastic TP8 job of 2..3 replicas fills three 8-GPU nodes at t=0; a rigid TP8 job of priority 5
    # arrives at t=1000 (the trace has no priorities: set on its spec).
    trace = [
        TraceJob("E", 0.0, 50_000.0, 24, shape=(8, 1, 3)),
        TraceJob("H", 1_000.0, 2_000.0, 8, shape=(8, 1, 1)),
    ]
    simulation = Simulation(
        Topology.uniform(3, gpus_per_node=8), trace, SimConfig(queue=queue, elastic=0.5, check_invariants=True)
    )
    simulation.specs[1] = dataclasses.replace(simulation.specs[1], priority=5)
    return simulation


@pytest.mark.parametrize("queue", ["fifo", "core-fair"])
def test_a_higher_priority_rigid_job_takes_a_growth_replica(queue: str) -> None:
    simulation = _simulation(queue)
    result = simulation.run()
    elastic, rigid = simulation.jobs["E"], simulation.jobs["H"]
    assert rigid.first_start is not None and rigid.first_start < 1_000.0 + 60  # no wait for E to end
    assert rigid.preemptions == 0 and elastic.preemptions == 0 and elastic.requeues == 0  # no whole gang
    assert elastic.shrinks == 1
    assert elastic.resizes == 2  # shrank to 2, grew back to 3 after H ended
    assert elastic.finished is not None and rigid.finished is not None
    assert result.metrics["elastic_shrinks"] == 1


def test_same_priority_waits_instead() -> None:
    simulation = _simulation("fifo")
    simulation.specs[1] = dataclasses.replace(simulation.specs[1], priority=0)
    simulation.run()
    assert simulation.jobs["E"].shrinks == 0
    assert simulation.jobs["H"].first_start == pytest.approx(simulation.jobs["E"].finished, abs=1.0)


def test_a_report_counts_resizes_apart_from_failures(tmp_path: Path) -> None:
    # Issue 38: with --elastic and no failures the report said "failures injected 0" next to "goodput lost to
    # failures 43.7 GPU-h" (the resizes' overhead counted as a failure's) and nothing about the resizes.
    # E (TP8 x DP3, min 2) arrives while rigid R holds one of three nodes: admitted at 2 replicas, it grows to 3
    # when R ends, holding its 24 GPUs idle for the 30 s resize overhead.
    trace = tmp_path / "trace.csv"
    trace.write_text("submit_s,duration_s,num_gpus,tenant,tp,pp,dp\n0,1000,8,a,8,1,1\n10,50000,24,b,8,1,3\n")
    out = tmp_path / "out"
    argv = ["simulate", "--trace", str(trace), "--nodes", "3", "--elastic", "0.5", "--out", str(out), "--no-plots"]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())["policies"]["ours"]
    assert metrics["failures"]["injected"] == 0
    assert metrics["goodput_lost"]["total_gpu_hours"] == 0.0
    assert (metrics["elastic_grows"], metrics["elastic_shrinks"], metrics["elastic_drops"]) == (1, 0, 0)
    assert metrics["elastic_resizes"] == 1
    assert metrics["elastic_resize_gpu_hours"] == pytest.approx(30.0 * 24 / 3600)
    report = (out / "report.md").read_text()
    assert "| goodput lost to failures (GPU-h) | 0.0 |" in report
    assert "| elastic grows | 1 |" in report
    assert "| elastic shrinks (for a higher-priority job) | 0 |" in report
    assert "| elastic drops (a replica lost to a failure) | 0 |" in report
    assert "| GPUs held idle by grows and shrinks (GPU-h) | 0.2 |" in report


def test_grows_shrinks_and_drops_add_up_to_the_resizes() -> None:
    simulation = _simulation("fifo")
    metrics = simulation.run().metrics
    job = simulation.jobs["E"]
    assert (job.grows, job.shrinks, job.drops) == (1, 1, 0)
    kinds = ("elastic_grows", "elastic_shrinks", "elastic_drops")
    assert metrics["elastic_resizes"] == sum(metrics[kind] for kind in kinds) == 2
    assert metrics["goodput_lost"]["total_gpu_hours"] == 0.0  # no failure: both resizes are in their own row
    assert metrics["elastic_resize_gpu_hours"] > 0.0

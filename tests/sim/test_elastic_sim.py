"""Elastic jobs in the simulator: a higher-priority rigid job takes a growth replica (highest first) instead
of waiting, through the built-in FIFO queue and through the core queue policies' pass alike; a broken replica
with no spare is dropped (``tests/test_elastic_two_shells.py`` compares that with the operator)."""

from __future__ import annotations

import dataclasses

import pytest

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

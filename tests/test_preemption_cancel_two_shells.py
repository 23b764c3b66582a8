"""Whether a preemption under way still stands, through both shells: the operator
(``k8s/plan/moves/preempting.continue_preemption``) and the simulator (``sim/run/disruptions``, asked at every pass,
when a victim fails and at the deadline) must ask ``core.admit.preemption.preemption_stands`` and carry out its
answer (issue 39: the simulator stopped every victim at its deadline, whatever had happened meanwhile).

One 8-GPU node under the core queue with preemption (grace 5 s). ``lo`` (priority 0) runs; ``hi`` (priority 10)
arrives and the core preempts ``lo`` for it. Inside the grace period a worker of ``lo`` crashes: it restarts in
place (Recovering), so the preemption no longer stands and is cancelled; once ``lo`` runs again, the next pass
preempts it again and ``hi`` runs after that second grace period. A shell that kept the first preemption (or
decided standing by a rule of its own) plans one preemption where the other plans two, or tells the core
something else.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from paralleljob.core.admit import admission
from paralleljob.core.admit.preemption import Standing, preemption_stands
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.parse.queues import queue_policy
from paralleljob.k8s.plan.admission import policy_admission
from paralleljob.k8s.plan.moves import preempting
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.core_queue import CoreQueue
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

SCHEDULE = admission.schedule  # the core's pass, before any spy replaces it


def at(seconds: float) -> str:
    return f"2024-01-01T00:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}Z"


def _name(key: str) -> str:
    return key.split("/")[-1]


def _spy(monkeypatch: pytest.MonkeyPatch, standing: Any, planning: Any) -> dict[str, list[str]]:
    """The distinct answers of ``preemption_stands`` (with what it was told) and every preemption planned."""
    seen: dict[str, list[str]] = {"asked": [], "plans": []}

    def stands(victim: Phase, for_job: str, for_phase: Phase | None) -> Standing:
        verdict = preemption_stands(victim, for_job, for_phase)
        said = f"{victim.value}, {_name(for_job)} {for_phase.value if for_phase else 'gone'}: {verdict.stands}"
        if said not in seen["asked"]:
            seen["asked"].append(said)
        return verdict

    def schedule(*args: Any, **kwargs: Any) -> Any:
        plan = SCHEDULE(*args, **kwargs)
        for d in plan.decisions:
            if isinstance(d, admission.Preempt):
                seen["plans"].append(f"preempt {','.join(map(_name, d.victims))} for {_name(d.for_job)}")
        return plan

    monkeypatch.setattr(standing, "preemption_stands", stands)
    monkeypatch.setattr(planning, "schedule", schedule)
    return seen


def test_a_preemption_whose_victim_restarts_is_cancelled_in_both_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = queue_policy("fair-backfill-preempt", 5)
    assert policy is not None
    operator = _spy(monkeypatch, preempting, policy_admission)
    fc = FakeCluster([node("n0")], policy=policy)
    fc.add_job(paralleljob("lo", 8, 1, 1, memory=0.0, created=at(0)))
    fc.step(at(0))
    fc.step(at(1))
    fc.add_job(paralleljob("hi", 8, 1, 1, memory=0.0, priority=10, created=at(2)))
    fc.step(at(2))
    fc.step(at(3))
    assert fc.job("ns/lo")["status"].get("preemption"), "the first preemption is under way"
    [worker] = fc.job_pods("ns/lo")
    worker["status"]["phase"] = "Failed"
    for second in range(4, 30):
        fc.step(at(second))
    assert fc.phase("ns/hi") == "Running" and fc.phase("ns/lo") == "Queued"
    assert fc.job("ns/lo")["status"]["restarts"] == 1
    conditions = {c["type"]: c for c in fc.job("ns/lo")["status"]["conditions"]}
    assert conditions["PreemptionPending"]["reason"] == "Preempted"

    monkeypatch.undo()
    simulated = _spy(monkeypatch, disruptions, admission)
    trace = [
        TraceJob("ns/lo", 0.0, 10_000.0, 8, shape=(8, 1, 1)),
        TraceJob("ns/hi", 2.0, 1_000.0, 8, shape=(8, 1, 1)),
    ]
    crash = Failure(4.0, 0, "worker", Scope.SOFTWARE, 0, 0.0)
    config = SimConfig(queue="core-fair", scripted_failures=(crash,), restart_overhead_s=3.0, check_invariants=True)
    assert fc.last_view is not None and fc.last_view.state is not None
    simulation = Simulation(fc.last_view.state.topology, trace, config)
    assert isinstance(simulation.queue, CoreQueue)
    simulation.queue.policy = policy
    simulation.specs[1] = dataclasses.replace(simulation.specs[1], priority=10)
    simulation.run()
    lo, hi = simulation.jobs["ns/lo"], simulation.jobs["ns/hi"]
    assert lo.restarts == 1 and lo.preemptions == 1 and hi.first_start is not None
    assert hi.first_start > 4.0 + 3.0 + 5.0 - 1e-9, "after lo ran again and a second grace period"

    assert operator["plans"] == simulated["plans"] == ["preempt lo for hi", "preempt lo for hi"]
    assert "Recovering, hi Queued: False" in operator["asked"]
    assert sorted(operator["asked"]) == sorted(simulated["asked"]), (operator["asked"], simulated["asked"])

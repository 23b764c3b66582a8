"""The core queue's path (``--queue-policy fair...`` in the operator, ``--queue core-*`` in the simulator) through
both shells: the same entry gate while preemption victims stop, growth replicas before whole gangs for a
waiting elastic job, a repaired job's move back decided before the admissions, and "never fits" decided before
the queue's pass.

Each test runs one scenario on the operator's FakeCluster with a core ``QueuePolicy``, then the simulator on
the operator's topology with the same jobs and the same policy object, and compares what each shell asked the
core and when. A shell that forked a rule (asked no gate, evicted whole gangs for an elastic job where growth
replicas would do, moved a job back after admitting, failed a never-fitting job only once it reached its
line's head) answers otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from paralleljob.core import elastic as core_elastic
from paralleljob.core.admit import admission, gates
from paralleljob.core.admit.passorder import PASS_ORDER, PassStep
from paralleljob.core.admit.queueing import QueuePolicy
from paralleljob.core.reoptimize import decide_migration
from paralleljob.core.topology import Topology
from paralleljob.k8s.edge.parse.queues import queue_policy
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.admission import fifo_admission, policy_admission
from paralleljob.k8s.plan.moves import reoptimizing
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions, lines, passes
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.core_queue import CoreQueue
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

SCHEDULE = admission.schedule  # the core's pass, before any spy replaces it
TAKES = core_elastic.takes_growth_replicas


def at(seconds: float) -> str:
    return f"2024-01-01T00:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}Z"


def _topology(fc: FakeCluster) -> Topology:
    assert fc.last_view is not None and fc.last_view.state is not None
    return fc.last_view.state.topology


def _simulation(
    fc: FakeCluster, trace: list[TraceJob], queue_policy: QueuePolicy, priorities: dict[str, int], **config: Any
) -> Simulation:
    """The simulator on the operator's topology under the core queue, with the operator's very policy and the
    jobs' priorities."""
    simulation = Simulation(_topology(fc), trace, SimConfig(queue="core-fair", check_invariants=True, **config))
    assert isinstance(simulation.queue, CoreQueue)
    simulation.queue.policy = queue_policy
    for i, job in enumerate(simulation.trace):
        priority = priorities.get(job.job_id.split("/")[-1], 0)
        simulation.specs[i] = dataclasses.replace(simulation.specs[i], priority=priority)
    return simulation


def _name(key: str) -> str:
    return key.split("/")[-1]


def _spy_gates_and_plans(monkeypatch: pytest.MonkeyPatch, gating: Any, planning: Any) -> dict[str, list[str]]:
    """The entry gate's distinct verdicts (with the preemption it was told of, up to its deadline) and each
    decision of the core's pass that is not an admission or a plain wait."""
    seen: dict[str, list[str]] = {"gates": [], "plans": []}

    def gate(entry: gates.Entry) -> gates.Gate | None:
        verdict = gates.entry_gate(entry)
        said = f"{'open' if verdict is None else verdict.reason}: {(entry.making_room or '').split(';')[0]}"
        if said not in seen["gates"]:
            seen["gates"].append(said)
        return verdict

    def schedule(*args: Any, **kwargs: Any) -> Any:
        plan = SCHEDULE(*args, **kwargs)
        for d in plan.decisions:
            if isinstance(d, admission.Preempt):
                seen["plans"].append(f"preempt {','.join(map(_name, d.victims))} for {_name(d.for_job)}")
            elif isinstance(d, admission.ShrinkReplicas):
                seen["plans"].append(f"shrink {','.join(_name(r.job_id) for r in d.resizes)} for {_name(d.for_job)}")
        return plan

    monkeypatch.setattr(gating, "entry_gate", gate)
    monkeypatch.setattr(planning, "schedule", schedule)
    return seen


def test_a_job_whose_victims_still_stop_is_held_by_the_same_gate_in_both_shells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One 8-GPU node. ``lo`` (priority 0) runs; ``hi`` (priority 10) arrives and the core preempts ``lo`` for
    # it (grace 5 s); ``other`` arrives inside the grace period, so both shells pass again while ``lo`` still
    # stops: ``hi`` is held with Preempting (entry_gate, told of the preemption under way) and ``lo`` is
    # offered to no second preemption. Once ``lo`` has stopped, ``hi`` is admitted.
    policy = queue_policy("fair-backfill-preempt", 5)
    assert policy is not None
    priorities = {"lo": 0, "hi": 10, "other": 0}
    operator = _spy_gates_and_plans(monkeypatch, policy_admission, policy_admission)
    fc = FakeCluster([node("n0")], policy=policy)
    fc.add_job(paralleljob("lo", 8, 1, 1, memory=0.0, created=at(0)))
    fc.step(at(0))
    fc.step(at(1))
    fc.add_job(paralleljob("hi", 8, 1, 1, memory=0.0, priority=10, created=at(2)))
    fc.step(at(2))
    fc.step(at(3))
    fc.add_job(paralleljob("other", 8, 1, 1, memory=0.0, created=at(4)))
    for second in (4, 5, 6, 7, 8, 9):
        fc.step(at(second))
    assert fc.phase("ns/hi") == "Running" and fc.phase("ns/lo") == "Queued"

    monkeypatch.undo()
    simulated = _spy_gates_and_plans(monkeypatch, lines, admission)
    trace = [
        TraceJob("ns/lo", 0.0, 10_000.0, 8, shape=(8, 1, 1)),
        TraceJob("ns/hi", 2.0, 1_000.0, 8, shape=(8, 1, 1)),
        TraceJob("ns/other", 4.0, 1_000.0, 8, shape=(8, 1, 1)),
    ]
    simulation = _simulation(fc, trace, policy, priorities)
    simulation.run()
    assert simulation.jobs["ns/hi"].first_start == pytest.approx(7.0, abs=1.0)

    expected_gates = ["open: ", "Preempting: preempting ns/lo"]
    assert operator["gates"] == simulated["gates"] == expected_gates
    assert operator["plans"] == simulated["plans"] == ["preempt lo for hi"]


def _elastic(name: str, dp: int, priority: int, created: str) -> dict[str, Any]:
    body = paralleljob(name, 8, 1, dp, memory=0.0, priority=priority, created=created)
    body["spec"]["parallelism"].update(minData=1, maxData=dp)
    return body


def test_a_waiting_elastic_job_takes_growth_replicas_before_whole_gangs_in_both_shells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Three 8-GPU nodes. ``el`` (elastic TP8, 1..3 replicas, priority 0) runs at 3. ``grow`` (elastic TP8, 1..2,
    # priority 5) arrives and does not fit. With preemption on, the core's next resort would be evicting ``el``
    # whole; growth replicas are cheaper, so both shells let ``grow`` take ``el``'s highest one
    # (core.elastic.takes_growth_replicas, asked by the core's pass for both), as much as its minimum needs:
    # ``el`` keeps running at 2 and ``grow`` starts at 1.
    policy = queue_policy("fair-backfill-preempt", 5)
    assert policy is not None
    asked: list[tuple[bool, bool]] = []

    def takes(elastic: bool, *, whole_gangs_next: bool) -> bool:
        verdict = TAKES(elastic, whole_gangs_next=whole_gangs_next)
        if (elastic, verdict) not in asked:
            asked.append((elastic, verdict))
        return verdict

    monkeypatch.setattr(admission, "takes_growth_replicas", takes)
    operator = _spy_gates_and_plans(monkeypatch, policy_admission, policy_admission)
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(3)], policy=policy)
    fc.add_job(_elastic("el", 3, 0, at(0)))
    for second in range(4):
        fc.step(at(second))
    assert fc.job("ns/el")["status"]["replicas"] == 3
    fc.add_job(_elastic("grow", 2, 5, at(10)))
    for second in range(10, 20):
        fc.step(at(second))
    assert fc.phase("ns/grow") == "Running" and fc.job("ns/grow")["status"]["replicas"] == 1
    assert fc.phase("ns/el") == "Running" and fc.job("ns/el")["status"]["replicas"] == 2
    operator_asked = list(asked)

    monkeypatch.undo()
    asked.clear()
    monkeypatch.setattr(admission, "takes_growth_replicas", takes)
    simulated = _spy_gates_and_plans(monkeypatch, lines, admission)
    model = parse_job(_elastic("el", 3, 0, at(0))).request.spec.model  # type: ignore[union-attr]
    trace = [
        TraceJob("ns/el", 0.0, 1e5, 24, shape=(8, 1, 3), model=model),
        TraceJob("ns/grow", 10.0, 1_000.0, 16, shape=(8, 1, 2), model=model),
    ]
    simulation = _simulation(fc, trace, policy, {"grow": 5}, elastic=0.3)  # el 1..3, grow 1..2
    simulation.run()
    assert simulation.jobs["ns/grow"].spec.dp == 1 and simulation.jobs["ns/el"].shrinks == 1  # el grew back later

    assert operator["plans"] == simulated["plans"] == ["shrink el for grow"]
    assert operator_asked == asked == [(True, True)]  # ``grow`` asked, and allowed


def _in_pass_order(log: list[str]) -> list[list[PassStep]]:
    """The passes of ``log`` ("pass" starts one) that asked both a move back and the queue's pass, each as
    the steps in the order it took them."""
    out: list[list[PassStep]] = []
    current: list[PassStep] = []
    for entry in [*log, "pass"]:
        if entry == "pass":
            if PassStep.MOVE_BACK in current and PassStep.ADMIT in current:
                out.append(current)
            current = []
        elif not current or current[-1] is not PassStep(entry):
            current.append(PassStep(entry))
    return out


def _spy_steps(monkeypatch: pytest.MonkeyPatch, moving: Any, planning: Any) -> list[str]:
    log: list[str] = []

    def migration(*args: Any, **kwargs: Any) -> Any:
        log.append(PassStep.MOVE_BACK.value)
        return decide_migration(*args, **kwargs)

    def schedule(*args: Any, **kwargs: Any) -> Any:
        log.append(PassStep.ADMIT.value)
        return SCHEDULE(*args, **kwargs)

    monkeypatch.setattr(moving, "decide_migration", migration)
    monkeypatch.setattr(planning, "schedule", schedule)
    return log


def test_both_shells_decide_a_move_back_before_the_admissions(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two leaves of two 8-GPU nodes. ``j`` (TP8 x DP2) runs in one leaf; ``big`` (32 GPUs) waits, so every pass
    # asks the core's queue pass. A node under ``j`` goes down: its TP group moves to the other leaf (minimal
    # repair), and ``j`` is re-priced (core.reoptimize) in every later pass that looks at it. Each shell must
    # take a pass's steps in core.admit.passorder's order: the move back before the admissions.
    nodes = [node(f"gpu-node-{i:03d}", leaf=f"leaf-{i // 2}") for i in range(4)]
    policy = queue_policy("fair", 5)
    assert policy is not None
    operator_log = _spy_steps(monkeypatch, reoptimizing, policy_admission)
    fc = FakeCluster(list(nodes), policy=policy)
    fc.add_job(paralleljob("j", 8, 1, 2, memory=0.0, created=at(0)))
    fc.add_job(paralleljob("big", 8, 1, 4, memory=0.0, created=at(1)))
    for second in range(4):
        fc.step(at(second))
    status = fc.job("ns/j")["status"]
    down = status["placement"]["pods"][0]["node"]
    index = int(down.split("-")[-1])
    fc.nodes[down] = node(down, leaf=f"leaf-{index // 2}", ready=False)
    for second in range(4, 10):
        operator_log.append("pass")
        fc.step(at(second))
    assert fc.job("ns/j")["status"]["restarts"] == 1 and fc.phase("ns/j") == "Running"
    fc.nodes[down] = node(down, leaf=f"leaf-{index // 2}")
    for second in range(70, 75):  # past the operator's re-pricing interval (60 s)
        operator_log.append("pass")
        fc.step(at(second))

    monkeypatch.undo()
    sim_log = _spy_steps(monkeypatch, disruptions, admission)
    real_pass = passes.scheduling_pass

    def one_pass(sim: Any) -> None:
        sim_log.append("pass")
        real_pass(sim)

    monkeypatch.setattr(passes, "scheduling_pass", one_pass)
    trace = [
        TraceJob("ns/j", 0.0, 100_000.0, 16, shape=(8, 1, 2)),
        TraceJob("ns/big", 1.0, 1_000.0, 32, shape=(8, 1, 4)),
    ]
    failure = Failure(1_000.0, _topology(fc).node_index(down), "node", Scope.NODE, 0, 500.0)
    simulation = _simulation(fc, trace, policy, {}, policy="ours-reopt", scripted_failures=(failure,))
    simulation.run()
    assert simulation.jobs["ns/j"].restarts == 1

    operator_passes, sim_passes = _in_pass_order(operator_log), _in_pass_order(sim_log)
    assert operator_passes and sim_passes, "a pass asked both, in each shell"
    for steps in [*operator_passes, *sim_passes]:
        assert steps == sorted(steps, key=PASS_ORDER.index), steps


def test_both_shells_fail_a_job_that_never_fits_before_it_reaches_its_lines_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two 8-GPU nodes under the core's strict pass (no backfill). ``runner`` holds one node for long; ``head``
    # (16 GPUs) blocks the line; ``huge`` (TP16: no node holds a TP group) arrives behind it. Both shells fail
    # ``huge`` by fails_for_good before the queue's pass, while ``runner`` still runs, not when the line
    # reaches it.
    policy = queue_policy("fair", 5)
    assert policy is not None
    asked: list[tuple[bool, bool, bool]] = []

    def rule(permanent: bool, ran_before: bool) -> bool:
        verdict = gates.fails_for_good(permanent, ran_before)
        if permanent:
            asked.append((permanent, ran_before, verdict))
        return verdict

    for module in (fifo_admission, admission, passes):
        monkeypatch.setattr(module, "fails_for_good", rule)
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(2)], policy=policy)
    fc.add_job(paralleljob("runner", 8, 1, 1, memory=0.0, created=at(0)))
    fc.add_job(paralleljob("head", 8, 1, 2, memory=0.0, created=at(1)))
    for second in range(3):
        fc.step(at(second))
    fc.add_job(paralleljob("huge", 16, 1, 1, memory=0.0, created=at(3)))
    fc.step(at(3))
    fc.step(at(4))
    assert fc.phase("ns/huge") == "Failed" and fc.phase("ns/runner") == "Running"
    assert fc.phase("ns/head") == "Queued"
    message = fc.job("ns/huge")["status"]["message"]
    operator_asked = list(asked)

    asked.clear()
    trace = [
        TraceJob("ns/runner", 0.0, 10_000.0, 8, shape=(8, 1, 1)),
        TraceJob("ns/head", 1.0, 1_000.0, 16, shape=(8, 1, 2)),
        TraceJob("ns/huge", 3.0, 1_000.0, 16, shape=(16, 1, 1)),
    ]
    simulation = _simulation(fc, trace, policy, {})
    running_then: list[bool] = []
    real_reject = simulation.reject_done

    def reject(job: Any, reason: str) -> None:
        running_then.append("ns/runner" in simulation.running)
        real_reject(job, reason)

    monkeypatch.setattr(simulation, "reject_done", reject)
    simulation.run()
    huge = simulation.jobs["ns/huge"]
    assert huge.phase.value == "Failed" and message.endswith(huge.rejected_reason)
    assert operator_asked == asked == [(True, False, True)]
    assert running_then == [True], "failed before the line reached it"

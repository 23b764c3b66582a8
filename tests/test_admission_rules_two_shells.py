"""The FIFO path's caps, entry gates and rejection rule through both shells: the operator's reconcile pass and
the simulator's engine hand the same core pass (``core.admit.fifo.schedule_fifo``) the same caps and gates,
and fail a job that can never fit by the same rule (``core.admit.gates.fails_for_good``).

Each test runs one scenario on the operator's FakeCluster, then the simulator on the operator's topology with
the same jobs, and compares what each job was told pass after pass. A shell that forked a rule (dropped the
caps, skipped the gates, rejected by a rule of its own) tells some job something else, or never asks the core.
"""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core.admit import fifo, gates
from paralleljob.core.admit.admission import Admit
from paralleljob.core.admit.queueing import QueueSpec
from paralleljob.core.topology import Topology
from paralleljob.k8s.edge.parse.queues import parse_queue
from paralleljob.k8s.plan.admission import fifo_admission
from paralleljob.sim.run import lines, passes
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any) -> dict[str, list[str]]:
    """Each job's verdicts from the core's FIFO pass, pass after pass, repeats dropped (job name -> verdicts)."""
    histories: dict[str, list[str]] = {}

    def recording(*args: Any, **kwargs: Any) -> Any:
        decisions = fifo.schedule_fifo(*args, **kwargs)
        for d in decisions:
            verdict = "Admit" if isinstance(d, Admit) else str(d.reason)
            seen = histories.setdefault(d.job_id.split("/")[-1], [])
            if not seen or seen[-1] != verdict:
                seen.append(verdict)
        return decisions

    monkeypatch.setattr(module, "schedule_fifo", recording)
    return histories


def _topology(fc: FakeCluster) -> Topology:
    assert fc.last_view is not None and fc.last_view.state is not None
    return fc.last_view.state.topology


def _trace(jobs: list[tuple[str, str, int]]) -> list[TraceJob]:
    """(name, tenant, GPUs) of 8-GPU TP8 jobs, one a second; ``first`` ends after 1,000 s, the others run long."""
    return [
        TraceJob(f"ns/{name}", float(i), 1_000.0 if name == "first" else 1e6, gpus, tenant, (8, 1, gpus // 8))
        for i, (name, tenant, gpus) in enumerate(jobs)
    ]


def test_a_queue_cap_holds_the_same_job_back_in_both_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two 8-GPU nodes; queue ``team`` may hold 8 GPUs. ``first`` (team) fits; ``second`` (team) would fit the
    # free node but not the cap: QueueFull; ``other`` (no cap) takes that node. When ``first`` ends, the cap
    # lets ``second`` in (and the room comes back with it).
    operator = _spy(monkeypatch, fifo_admission)
    team = parse_queue({"metadata": {"name": "team"}, "spec": {"maxGPUs": 8}})
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(2)], queues={"team": team})
    for i, (name, queue) in enumerate((("first", "team"), ("second", "team"), ("other", "default"))):
        fc.add_job(paralleljob(name, 8, 1, 1, memory=0.0, queue=queue, created=f"2024-01-01T00:00:0{i}Z"))
    fc.settle(3)
    del fc.jobs["ns/first"]
    fc.pods = {k: p for k, p in fc.pods.items() if not k[1].startswith("first-")}
    fc.settle(3)
    assert fc.phase("ns/second") != "Queued"

    monkeypatch.undo()
    simulated = _spy(monkeypatch, passes)
    trace = _trace([("first", "team", 8), ("second", "team", 8), ("other", "default", 8)])
    config = SimConfig(quotas=(QueueSpec("team", max_gpus=8),), check_invariants=True)
    Simulation(_topology(fc), trace, config).run()

    expected = {"first": ["Admit"], "second": ["QueueFull", "Admit"], "other": ["Admit"]}
    assert operator == expected
    assert simulated == expected


def test_an_entry_gate_refuses_the_same_job_in_both_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    # Queue ``team`` serves namespace ``elsewhere`` only: a job of another namespace naming it waits with
    # QueueRefused (and holds nobody back), in the operator as in the simulator, whose tenant is the namespace.
    operator = _spy(monkeypatch, fifo_admission)
    asked: list[tuple[str, str | None]] = []

    def gate(entry: gates.Entry) -> gates.Gate | None:
        verdict = gates.entry_gate(entry)
        asked.append((entry.queue, None if verdict is None else str(verdict.reason)))
        return verdict

    monkeypatch.setattr(fifo_admission, "entry_gate", gate)
    team = parse_queue({"metadata": {"name": "team"}, "spec": {"namespaces": ["elsewhere"]}})
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(2)], queues={"team": team})
    fc.add_job(paralleljob("refused", 8, 1, 1, memory=0.0, queue="team", created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("served", 8, 1, 1, memory=0.0, created="2024-01-01T00:00:01Z"))
    fc.settle(3)
    operator_asked = sorted(set(asked))

    monkeypatch.undo()
    simulated = _spy(monkeypatch, passes)
    asked.clear()
    monkeypatch.setattr(lines, "entry_gate", gate)
    trace = _trace([("refused", "team", 8), ("served", "default", 8)])
    config = SimConfig(quotas=(QueueSpec("team", namespaces=("elsewhere",)),), check_invariants=True)
    simulation = Simulation(_topology(fc), trace, config)
    simulation.run()

    assert operator == simulated == {"refused": ["QueueRefused"], "served": ["Admit"]}
    assert operator_asked == sorted(set(asked)) == [("default", None), ("team", "QueueRefused")]
    assert fc.phase("ns/refused") == "Queued" and simulation.jobs["ns/refused"].phase.value == "Queued"


def test_a_job_that_never_fits_fails_by_the_same_rule_in_both_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    # TP16 fits no 8-GPU node: both shells ask the core's fails_for_good before the queue's pass (the operator's
    # refuse_before_queueing, the simulator's refuse_never_fitting) and fail the job with the same reason; the
    # 8-GPU job runs.
    asked: list[tuple[bool, bool, bool]] = []

    def rule(permanent: bool, ran_before: bool) -> bool:
        verdict = gates.fails_for_good(permanent, ran_before)
        if permanent:
            asked.append((permanent, ran_before, verdict))
        return verdict

    for module in (fifo_admission, fifo, passes):
        monkeypatch.setattr(module, "fails_for_good", rule)
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(2)])
    fc.add_job(paralleljob("huge", 16, 1, 1, memory=0.0, created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("fits", 8, 1, 1, memory=0.0, created="2024-01-01T00:00:01Z"))
    fc.settle(3)
    operator_asked = list(asked)
    status = fc.job("ns/huge")["status"]
    assert status["phase"] == "Failed" and fc.phase("ns/fits") != "Queued"

    asked.clear()
    trace = [
        TraceJob("ns/huge", 0.0, 1_000.0, 16, shape=(16, 1, 1)),
        TraceJob("ns/fits", 1.0, 1_000.0, 8, shape=(8, 1, 1)),
    ]
    simulation = Simulation(_topology(fc), trace, SimConfig(check_invariants=True))
    simulation.run()

    assert operator_asked == asked == [(True, False, True)]
    huge = simulation.jobs["ns/huge"]
    assert huge.phase.value == "Failed" and status["message"].endswith(huge.rejected_reason)
    assert simulation.jobs["ns/fits"].finished is not None


def test_a_job_the_empty_cluster_cannot_place_waits_in_both_shells() -> None:
    # Not "never" by the core's rule (its queue's cap is below its size: a ParallelJobQueue can be raised),
    # so neither shell fails it: the operator keeps it waiting, the simulator ends its run with it unfinished
    # instead of rejecting it by a rule of its own ("does not fit an empty, healthy cluster").
    team = parse_queue({"metadata": {"name": "team"}, "spec": {"maxGPUs": 8}})
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(2)], queues={"team": team})
    fc.add_job(paralleljob("wide", 8, 1, 2, memory=0.0, queue="team"))
    fc.settle(3)
    assert fc.phase("ns/wide") == "Queued"

    trace = _trace([("wide", "team", 16)])
    config = SimConfig(quotas=(QueueSpec("team", max_gpus=8),), check_invariants=True)
    result = Simulation(_topology(fc), trace, config).run()
    assert result.jobs[0].phase.value == "Queued" and not result.jobs[0].rejected_reason
    assert result.metrics["jobs"]["unfinished"] == 1

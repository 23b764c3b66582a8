"""The default strict FIFO through both shells: the operator's reconcile pass and the simulator's engine call
the same core pass (core.admit.fifo.schedule_fifo) and get the same decisions, job by job.

On two 8-GPU nodes: ``first`` (8 GPUs) fits, ``wide`` (16 GPUs) then does not and becomes the head, ``small``
(1 GPU) waits behind it although it would fit; when ``first`` ends, ``wide`` runs and ``small`` waits for room.
"""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core.admit import fifo
from paralleljob.core.admit.admission import Admit
from paralleljob.core.admit.fifo import DEFAULT_REQUEUE_ORDER, RequeueOrder
from paralleljob.core.failure.repair import FailureKind
from paralleljob.k8s.edge.parse import queues
from paralleljob.k8s.edge.parse.queues import parse_queue, requeue_stamp
from paralleljob.k8s.plan.admission import fifo_admission
from paralleljob.sim.cluster.clusters import uniform_cluster
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions
from paralleljob.sim.run import passes as sim_pass
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

SHAPES = {"first": (8, 1, 1), "wide": (8, 1, 2), "small": (1, 1, 1)}


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name_of: Any) -> list[list[tuple[str, str]]]:
    passes: list[list[tuple[str, str]]] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        decisions = fifo.schedule_fifo(*args, **kwargs)
        verdicts = [(name_of(d.job_id), "Admit" if isinstance(d, Admit) else str(d.reason)) for d in decisions]
        if verdicts and (not passes or verdicts != passes[-1]):
            passes.append(verdicts)
        return decisions

    monkeypatch.setattr(module, "schedule_fifo", recording)
    return passes


def test_the_operator_and_the_simulator_take_the_same_fifo_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    operator_passes = _spy(monkeypatch, fifo_admission, lambda key: key.split("/")[1])
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(2)])
    for i, (name, (tp, pp, dp)) in enumerate(SHAPES.items()):
        fc.add_job(paralleljob(name, tp, pp, dp, memory=10.0, created=f"2024-01-01T00:00:0{i}Z"))
    fc.settle(3)
    del fc.jobs["ns/first"]  # it ends: its pods go, its GPUs come back
    fc.pods = {k: p for k, p in fc.pods.items() if not k[1].startswith("first-")}
    fc.settle(3)
    assert fc.phase("ns/wide") != "Queued" and fc.phase("ns/small") == "Queued"

    sim_passes = _spy(monkeypatch, sim_pass, lambda job_id: job_id)
    topology = fc.last_view.state.topology if fc.last_view and fc.last_view.state else None
    assert topology is not None
    trace = [
        TraceJob(name, float(i), 1_000.0 if name == "first" else 1e6, tp * pp * dp, shape=(tp, pp, dp))
        for i, (name, (tp, pp, dp)) in enumerate(SHAPES.items())
    ]
    Simulation(topology, trace, SimConfig(memory_per_gpu_gb=10.0, check_invariants=True)).run()

    # the simulator sees the jobs arrive one by one, so its passes differ; each job's verdicts must not
    expected = {"first": ["Admit"], "wide": ["Unschedulable", "Admit"], "small": ["Waiting", "Unschedulable"]}
    assert _histories(operator_passes) == expected
    # ... and the simulator runs on until every job has ended (``small`` runs once ``wide`` is done)
    assert _histories(sim_passes) == {**expected, "small": [*expected["small"], "Admit"]}


def _histories(passes: list[list[tuple[str, str]]]) -> dict[str, list[str]]:
    """Each job's verdicts pass after pass, repeats dropped."""
    out: dict[str, list[str]] = {}
    for verdicts in passes:
        for name, verdict in verdicts:
            seen = out.setdefault(name, [])
            if not seen or seen[-1] != verdict:
                seen.append(verdict)
    return out


def test_a_job_requeued_after_its_hardware_broke_stands_where_the_operator_puts_it_in_both_shells() -> None:
    # The simulator's evidence is only the operator's if a requeued job waits at the same place by default.
    operator_default = parse_queue({"metadata": {"name": "q"}, "spec": {}}).requeue_order
    assert SimConfig().requeue_order is operator_default is DEFAULT_REQUEUE_ORDER


@pytest.mark.parametrize("order", list(RequeueOrder))
def test_both_shells_stamp_a_requeued_job_by_the_one_rule(
    order: RequeueOrder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A drain keeps the job's place, a crashed worker goes to the back, broken hardware follows the queue's
    # requeueOrder: the operator's queuedAt stamp and the simulator's rank both read core.admit.fifo.keeps_place.
    expected = {
        FailureKind.DRAINED: True, FailureKind.WORKER: False, FailureKind.NODE: order is RequeueOrder.KEEP_PLACE,
    }  # fmt: skip
    queue = parse_queue({"metadata": {"name": "q"}, "spec": {"requeueOrder": order.value}})
    for kind, keeps in expected.items():
        stamp = requeue_stamp(queue, kind, "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z")
        assert (stamp == "2024-01-01T00:00:00Z") is keeps is fifo.keeps_place(order, kind)
    asked: list[tuple[RequeueOrder, FailureKind]] = []

    def rule(order: RequeueOrder, kind: FailureKind) -> bool:
        asked.append((order, kind))
        return fifo.keeps_place(order, kind)

    monkeypatch.setattr(queues, "keeps_place", rule)
    monkeypatch.setattr(disruptions, "keeps_place", rule)
    requeue_stamp(queue, FailureKind.GPU, "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z")
    assert asked == [(order, FailureKind.GPU)]  # the operator asks the core, not a copy of the rule
    asked.clear()
    # the simulator: a node failure with no spare and onUnplaceable Requeue puts the job back in line
    topology = uniform_cluster(1, 8)
    trace = [TraceJob("j", 0.0, 10_000.0, 8, shape=(8, 1, 1))]
    failure = Failure(1_000.0, node=0, cause="NIC", scope=Scope.NODE, gpu_index=0, repair_s=500.0)
    config = SimConfig(requeue_order=order, scripted_failures=(failure,), check_invariants=True)
    Simulation(topology, trace, config).run()
    assert asked == [(order, FailureKind.NODE)]

"""One elastic job through both shells: the operator's passes and the simulator's engine ask the core's
``admission_size``, ``plan_growth``, ``drop_instead`` and ``counts_as_restart`` the same questions and get the
same answers, GPU ids included.

Three 8-GPU nodes; a rigid one-node job holds one; an elastic TP8 job (1..3 replicas) arrives, is admitted at
2, and grows to 3 next to the others when the rigid job ends. Then a failure: an elastic job of 2..3 fills
the three nodes, the node of its replica 1 fails with no spare, and both shells drop that replica and keep
the others where they are (the simulator then grows it back when the node is repaired). Then four
loss-and-heal cycles and a loss at min: both shells count five drops and one restart."""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core import elastic as core_elastic
from paralleljob.core.failure import elastic_failure
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.failure import failures as operator_failures
from paralleljob.k8s.plan.kinds import elastic_admission as operator_admission
from paralleljob.k8s.plan.kinds import resizing as operator_growth
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions as sim_disruptions
from paralleljob.sim.run import elastic as sim_elastic
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

KEY = "ns/el"


def _spy(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []
    real_admission = core_elastic.admission_size

    def admission(*args: Any, **kwargs: Any) -> Any:
        placement, reasons = real_admission(*args, **kwargs)
        seen.append(("admit", placement.dp if placement else None, placement.groups if placement else None))
        return placement, reasons

    def growth(*args: Any, **kwargs: Any) -> Any:
        grown = core_elastic.plan_growth(*args, **kwargs)
        if grown.resize is not None:
            seen.append(("grow", grown.resize.after, grown.resize.groups))
        return grown

    # place_largest (both admission paths of the operator) asks admission_size in the core module
    for module in (core_elastic, *modules):
        if hasattr(module, "admission_size"):
            monkeypatch.setattr(module, "admission_size", admission)
        if module is not core_elastic and hasattr(module, "plan_growth"):
            monkeypatch.setattr(module, "plan_growth", growth)
    return seen


def _elastic_body() -> dict[str, Any]:
    body = paralleljob("el", 8, 1, 3, memory=0.0)
    body["spec"]["parallelism"].update(minData=1, maxData=3)
    return body


def test_the_operator_and_the_simulator_size_an_elastic_job_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    operator_seen = _spy(monkeypatch, operator_admission, operator_growth)
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(3)])
    fc.add_job(paralleljob("filler", 8, 1, 1, memory=0.0))
    fc.settle(2)
    fc.add_job(_elastic_body())
    fc.settle(3)
    del fc.jobs["ns/filler"]
    fc.settle(3)
    assert fc.job(KEY)["status"]["replicas"] == 3
    assert [s[:2] for s in operator_seen] == [("admit", 2), ("grow", 3)]

    monkeypatch.undo()
    sim_seen = _spy(monkeypatch, sim_elastic)
    topology = fc.last_view.state.topology if fc.last_view and fc.last_view.state else None
    assert topology is not None
    spec = parse_job(_elastic_body()).request.spec  # type: ignore[union-attr]
    trace = [
        TraceJob("ns/filler", 0.0, 1_000.0, 8, shape=(8, 1, 1), model=spec.model),
        TraceJob(KEY, 1.0, 100_000.0, 24, shape=(8, 1, 3), model=spec.model),
    ]
    simulation = Simulation(topology, trace, SimConfig(elastic=0.3, check_invariants=True))
    simulation.run()
    assert sim_seen == operator_seen
    assert simulation.jobs[KEY].resizes == 1 and simulation.jobs[KEY].finished is not None


def _spy_drops(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []
    real = elastic_failure.drop_instead

    def drop(*args: Any, **kwargs: Any) -> Any:
        resize = real(*args, **kwargs)
        if resize is not None:
            seen.append((resize.kind, resize.before, resize.after, resize.groups))
        return resize

    monkeypatch.setattr(module, "drop_instead", drop)
    return seen


def test_a_node_failure_with_no_spare_drops_the_same_replica_in_both_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    # An elastic TP8 job of 2..3 replicas fills three 8-GPU nodes; the node of replica 1 fails and nothing
    # is spare: both shells ask the core's drop_instead and keep replicas 0 and 2 on their GPUs.
    operator_seen = _spy_drops(monkeypatch, operator_failures)
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(3)])
    body = paralleljob("el", 8, 1, 3, memory=0.0)
    body["spec"]["parallelism"].update(minData=2, maxData=3)
    fc.add_job(body)
    fc.settle(3)
    assert fc.job(KEY)["status"]["replicas"] == 3
    view = fc.last_view
    assert view is not None and view.state is not None
    topology = view.state.topology
    groups = view.state.allocations[KEY].groups
    failed = topology.gpu_node[groups[1][0]]
    name = topology.node_names[failed]
    fc.nodes[name] = node(name, ready=False)
    fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Running" and status["replicas"] == 2
    assert status["lastFailure"]["action"] == "DroppedReplica"
    assert [s[:3] for s in operator_seen] == [(core_elastic.ResizeKind.DROP, 3, 2)]
    assert operator_seen[0][3] == (groups[0], groups[2])

    monkeypatch.undo()
    sim_seen = _spy_drops(monkeypatch, sim_elastic)
    spec = parse_job(body).request.spec  # type: ignore[union-attr]
    trace = [TraceJob(KEY, 0.0, 100_000.0, 24, shape=(8, 1, 3), model=spec.model)]
    failure = Failure(1_000.0, node=failed, cause="NIC", scope=Scope.NODE, gpu_index=0, repair_s=500.0)
    config = SimConfig(elastic=0.5, check_invariants=True, scripted_failures=(failure,))
    simulation = Simulation(topology, trace, config)
    simulation.run()
    assert sim_seen == operator_seen  # the same replica dropped, the same GPUs kept
    job = simulation.jobs[KEY]
    assert job.drops == 1 and job.requeues == 0 and job.finished is not None
    assert job.resizes == 2  # dropped to 2, grew back to 3 once the node was repaired


def _spy_counts(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[tuple[str, str, bool]]:
    seen: list[tuple[str, str, bool]] = []

    def counts(kind: Any, outcome: Any) -> bool:
        counted = elastic_failure.counts_as_restart(kind, outcome)
        seen.append((kind.hardware, type(outcome).__name__, counted))
        return counted

    monkeypatch.setattr(module, "counts_as_restart", counts)
    return seen


def test_both_shells_count_drops_apart_from_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    # An elastic TP8 job of 2..3 replicas fills three 8-GPU nodes (the default maxRestarts 3). Four times a
    # node is lost and healed: each loss drops a replica, each heal grows it back, and no restart is counted.
    # Then two nodes go at once: the second loss finds the job at min, the policy requeues it, one restart.
    # Both shells ask the core's counts_as_restart the same questions and end with the same counts.
    operator_seen = _spy_counts(monkeypatch, operator_failures)
    names = [f"gpu-node-{i:03d}" for i in range(3)]
    fc = FakeCluster([node(n) for n in names])
    body = paralleljob("el", 8, 1, 3, memory=0.0)
    body["spec"]["parallelism"].update(minData=2, maxData=3)
    fc.add_job(body)
    fc.settle(3)
    for cycle in range(4):
        name = names[cycle % 3]
        fc.nodes[name] = node(name, ready=False)
        fc.settle(3)
        assert fc.job(KEY)["status"]["replicas"] == 2
        fc.nodes[name] = node(name)
        fc.settle(3)
        assert fc.job(KEY)["status"]["replicas"] == 3
    for name in names[:2]:
        fc.nodes[name] = node(name, ready=False)
        fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Queued"
    assert (status["restarts"], status["elastic"]["drops"]) == (1, 5)
    assert operator_seen == [(True, "Resize", False)] * 5 + [(True, "Requeue", True)]

    view = fc.last_view
    assert view is not None and view.state is not None
    topology = view.state.topology
    monkeypatch.undo()
    sim_seen = _spy_counts(monkeypatch, sim_disruptions)
    spec = parse_job(body).request.spec  # type: ignore[union-attr]
    trace = [TraceJob(KEY, 0.0, 200_000.0, 24, shape=(8, 1, 3), model=spec.model)]

    def loss(at: float, name: str) -> Failure:
        return Failure(at, node=topology.node_names.index(name), cause="NIC", scope=Scope.NODE, gpu_index=0,
                       repair_s=500.0)

    failures = [loss(2_000.0 * (c + 1), names[c % 3]) for c in range(4)]
    failures += [loss(10_000.0, names[0]), loss(10_100.0, names[1])]
    config = SimConfig(elastic=0.5, check_invariants=True, scripted_failures=tuple(failures))
    simulation = Simulation(topology, trace, config)
    simulation.run()
    assert sim_seen == operator_seen
    job = simulation.jobs[KEY]
    assert (job.restarts, job.drops) == (1, 5) and job.finished is not None

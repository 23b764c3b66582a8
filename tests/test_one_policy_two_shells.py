"""One failure scenario through both shells: the operator's reconcile passes and the simulator's engine must
ask the core the same questions and get the same answers (core.failure.repair.decide_repair), decision by decision.

The scenario, on four 8-GPU nodes under one leaf, for a job of two 8-GPU TP groups (one per node) with
``maxRestarts: 2``: a GPU under group 0 breaks (minimal repair: group 0 moves to a spare node), then group 1's
worker crashes (restart in place), then the node now under group 0 goes down (maxRestarts reached: the job
gives up). Both shells see the same topology, so even the GPU ids of each repair must agree.
"""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core.failure.repair import FailureKind, FailurePolicy, GiveUpReason
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.failure import failures as operator_failures
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions as sim_failures
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.repairspy import spy_repairs

NODES = [node(f"gpu-node-{i:03d}") for i in range(4)]
JOB = paralleljob("j", 8, 2, 1, max_restarts=2)
KEY = "ns/j"
FOREVER = 1e9


def _operator_run(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[Any, ...]], list[str], int, FakeCluster]:
    seen = spy_repairs(monkeypatch, operator_failures)
    fc = FakeCluster(list(NODES))
    fc.add_job(JOB)
    fc.settle()
    record = record_from_status(fc.job(KEY)["status"])
    assert record is not None and fc.phase(KEY) == "Running"
    first_nodes = [slot.node for slot in record.slots]
    broken = record.slots[0]
    fc.nodes[broken.node] = node(broken.node, unhealthy=str(broken.gpu_indices[0]))
    fc.settle()
    assert fc.phase(KEY) == "Running"
    [worker] = [p for p in fc.job_pods(KEY) if p["spec"]["nodeName"] == record.slots[1].node]
    worker["status"]["phase"] = "Failed"
    fc.settle()
    assert fc.phase(KEY) == "Running"
    moved = record_from_status(fc.job(KEY)["status"])
    assert moved is not None
    fc.nodes[moved.slots[0].node] = node(moved.slots[0].node, ready=False)
    fc.settle()
    return seen, [*first_nodes, moved.slots[0].node], broken.gpu_indices[0], fc


def _simulator_run(fc: FakeCluster, nodes: list[str], broken_gpu: int) -> Simulation:
    assert fc.last_view is not None and not fc.last_view.empty
    topology = fc.last_view.topology
    spec = parse_job(JOB).request.spec
    first0, first1, moved0 = (topology.node_index(n) for n in nodes)
    scripted = (
        Failure(1_000.0, first0, "gpu", Scope.GPU, broken_gpu, FOREVER),
        Failure(2_000.0, first1, "worker", Scope.SOFTWARE, 0, 0.0),
        Failure(3_000.0, moved0, "node", Scope.NODE, 0, FOREVER),
    )
    trace = [TraceJob(KEY, 0.0, 100_000.0, spec.num_gpus, shape=(spec.tp, spec.pp, spec.dp), model=spec.model)]
    config = SimConfig(
        memory_per_gpu_gb=spec.memory_per_gpu_gb,
        scripted_failures=scripted,
        failure_policy=FailurePolicy(max_restarts=2),
        check_invariants=True,
    )
    simulation = Simulation(topology, trace, config)
    simulation.run()
    return simulation


def test_the_operator_and_the_simulator_take_the_same_failure_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    operator_seen, nodes, broken_gpu, fc = _operator_run(monkeypatch)
    sim_seen = spy_repairs(monkeypatch, sim_failures)
    simulation = _simulator_run(fc, nodes, broken_gpu)
    kinds = [kind for kind, _, _ in operator_seen]
    assert kinds == [FailureKind.GPU, FailureKind.WORKER, FailureKind.NODE]
    assert operator_seen[0][2][2] == (0,) and operator_seen[1][2] == ("Rescheduled", None, (1,))
    assert operator_seen[2][2] == ("GiveUp", GiveUpReason.MAX_RESTARTS)
    assert sim_seen == operator_seen
    # and both shells carry the answer out the same way
    assert fc.phase(KEY) == "Failed" and simulation.jobs[KEY].phase.value == "Failed"
    assert fc.job(KEY)["status"]["restarts"] == simulation.jobs[KEY].restarts == 2

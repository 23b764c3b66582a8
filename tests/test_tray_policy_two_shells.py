"""One NVL72 tray-failure scenario through both shells: the operator's tray repair (``k8s/plan/kinds/trayrepair``)
and the simulator's NVL72 policy (``ours-nvl72``) must ask ``core.failure.repair.decide_repair`` the same questions and
get the same answers, decision by decision (issue 39: the operator's tray repair used to skip it).

Two racks of 6 trays of 4 GPUs, a TP8xDP2 job (two TP groups of two whole trays) with ``maxRestarts: 1`` and
the operator's default ``strategy: minimal`` (the simulator's ``ours-nvl72`` policy's): a GPU of the tray under
group 0 breaks (the NVLink placer's repair: a free tray of the same clique takes its ranks, group 1 keeps
running), then the node of a tray under group 1 goes down (maxRestarts reached: the job gives up). The
simulator runs on the operator's NVLink topology, so the GPU ids of each repair must agree too.
"""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import FailureKind, FailurePolicy, GiveUpReason
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from paralleljob.k8s.plan.admission.trayadmission import nvlink_topology
from paralleljob.k8s.plan.kinds import trayrepair
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions as sim_failures
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.repairspy import spy_repairs

TRAYS = [
    node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
    for r in range(2)
    for t in range(6)
]
JOB = paralleljob("j", 8, 1, 2, memory=10.0, max_restarts=1)
KEY = "ns/j"
FOREVER = 1e9


def _record(fc: FakeCluster) -> PlacementRecord:
    record = record_from_status(fc.job(KEY)["status"])
    assert record is not None and record.trays, fc.job(KEY)["status"]
    return record


def _operator_run(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[Any, ...]], list[str], FakeCluster]:
    seen = spy_repairs(monkeypatch, trayrepair)
    fc = FakeCluster(list(TRAYS))
    fc.add_job(JOB)
    fc.settle()
    first = _record(fc)
    assert fc.phase(KEY) == "Running"
    by_rank = sorted(first.trays, key=lambda t: t.node_rank)
    gpu_tray, node_tray = by_rank[0], by_rank[-1]  # under group 0, under group 1
    fc.nodes[gpu_tray.node] = node(
        gpu_tray.node, 4, leaf=f"leaf-{gpu_tray.node[:2]}", product="NVIDIA-GB200",
        labels={cd.CLIQUE_LABEL: gpu_tray.clique}, unhealthy=str(gpu_tray.gpu_indices[0]),
    )  # fmt: skip
    fc.settle()
    assert fc.phase(KEY) == "Running"
    fc.nodes[node_tray.node]["status"]["conditions"][0]["status"] = "False"
    fc.settle()
    return seen, [gpu_tray.node, node_tray.node], fc


def _simulator_run(fc: FakeCluster, nodes: list[str]) -> Simulation:
    assert fc.last_view is not None
    topology = nvlink_topology(fc.last_view)
    assert topology is not None
    spec = parse_job(JOB).request.spec
    gpu_node, down_node = (topology.node_index(n) for n in nodes)
    scripted = (
        Failure(1_000.0, gpu_node, "gpu", Scope.GPU, 0, FOREVER),
        Failure(2_000.0, down_node, "node", Scope.NODE, 0, FOREVER),
    )
    trace = [TraceJob(KEY, 0.0, 100_000.0, spec.num_gpus, shape=(spec.tp, spec.pp, spec.dp), model=spec.model)]
    config = SimConfig(
        policy="ours-nvl72",
        memory_per_gpu_gb=spec.memory_per_gpu_gb,
        scripted_failures=scripted,
        failure_policy=FailurePolicy(strategy=RecoveryStrategy.MINIMAL, max_restarts=1),
        check_invariants=True,
    )
    simulation = Simulation(topology, trace, config)
    simulation.run()
    return simulation


def test_the_operator_and_the_simulator_take_the_same_tray_failure_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    operator_seen, nodes, fc = _operator_run(monkeypatch)
    sim_seen = spy_repairs(monkeypatch, sim_failures)
    simulation = _simulator_run(fc, nodes)
    assert [kind for kind, _, _ in operator_seen] == [FailureKind.GPU, FailureKind.NODE]
    assert operator_seen[0][2][0] == "Rescheduled" and operator_seen[0][2][2] == (0,)  # minimal: the broken group
    assert operator_seen[1][2] == ("GiveUp", GiveUpReason.MAX_RESTARTS)
    assert sim_seen == operator_seen
    assert fc.phase(KEY) == "Failed" and simulation.jobs[KEY].phase.value == "Failed"
    assert fc.job(KEY)["status"]["restarts"] == simulation.jobs[KEY].restarts == 1

"""A tray job's move back through both shells: the operator (``k8s/plan/moves/reoptimizing``) and the simulator's
``ours-nvl72`` policy (``sim/run/disruptions``) must put the same question to ``core.reoptimize`` and get the
same answer (issue 39: tray jobs were never re-optimised, then priced by a rule written twice).

Two racks of 6 trays of 4 GPUs. A TP8xDP2 job (two TP groups of two whole trays) runs in one rack; the rack's
other two trays are taken. A tray under it goes down: no spare is left in its rack, so the broken TP group
moves to the other rack (minimal repair) and the job's DP all-reduce crosses the spine. Once the tray is back,
both shells price the move back: the same cost now, the same best cost (the job whole in its first rack) and
the same 2 tray pods to re-create, and both move it there at a checkpoint.
"""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core.reoptimize import RECHECK_SECONDS, MigrationDecision, decide_migration
from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from paralleljob.k8s.plan.admission.trayadmission import nvlink_topology
from paralleljob.k8s.plan.moves import reoptimizing
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster

TRAYS = [
    node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
    for r in range(2)
    for t in range(6)
]
KEY = "ns/llm"
Asked = tuple[float, float, int, bool]  # current cost, best cost, pods to move, migrate


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Asked]:
    asked: list[Asked] = []

    def recording(current: float, best: float, pods: int, *args: Any, **kwargs: Any) -> MigrationDecision:
        decision = decide_migration(current, best, pods, *args, **kwargs)
        asked.append((round(current, 6), round(best, 6), pods, decision.migrate))
        return decision

    monkeypatch.setattr(module, "decide_migration", recording)
    return asked


def _record(fc: FakeCluster) -> PlacementRecord:
    found = record_from_status(fc.job(KEY)["status"])
    assert found is not None and found.trays, fc.job(KEY)["status"]
    return found


def _operator_run(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Asked], FakeCluster, str, set[str]]:
    asked = _spy(monkeypatch, reoptimizing)
    fc = FakeCluster(list(TRAYS))
    fc.add_job(paralleljob("llm", 8, 1, 2, memory=10.0, extra_spec={"checkpoint": {"intervalSeconds": 3600}}))
    for _ in range(4):
        fc.step(at(0))
    first = _record(fc)
    rack = first.trays[0].node.split("-")[0]
    used = {t.node for t in first.trays}
    for n, free in enumerate(sorted(f"{rack}-t{t:02d}" for t in range(6) if f"{rack}-t{t:02d}" not in used)):
        fc.pods[("other", f"x{n}")] = foreign_pod(f"x{n}", free, 4)
    broken = first.trays[-1].node
    fc.nodes[broken]["status"]["conditions"][0]["status"] = "False"
    for _ in range(4):
        fc.step(at(10))
    fc.nodes[broken]["status"]["conditions"][0]["status"] = "True"
    propose_at = 10 + int(RECHECK_SECONDS) + 1
    fc.step(at(propose_at))
    fc.job(KEY)["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(propose_at + 40)}
    fc.step(at(propose_at + 50))
    for t in range(6):
        fc.step(at(propose_at + 51 + t))
    return asked, fc, broken, used


def test_both_shells_price_and_make_the_same_move_back(monkeypatch: pytest.MonkeyPatch) -> None:
    operator_asked, fc, broken, first_trays = _operator_run(monkeypatch)
    after = _record(fc)
    assert {t.node for t in after.trays} == first_trays, "moved back onto the trays it first ran on"
    assert fc.last_view is not None
    topology = nvlink_topology(fc.last_view)
    assert topology is not None
    spec = parse_job(paralleljob("llm", 8, 1, 2, memory=10.0)).request.spec
    fillers = [
        TraceJob(f"x{n}", 1.0 + n, 1e6, 4, shape=(4, 1, 1), model=spec.model) for n in range(2)
    ]  # one tray each: the rack's other two trays, as the foreign pods take them
    trace = [TraceJob(KEY, 0.0, 1e5, spec.num_gpus, shape=(8, 1, 2), model=spec.model), *fillers]
    down = Failure(100.0, topology.node_index(broken), "node", Scope.NODE, 0, 1_000.0)
    sim_asked = _spy(monkeypatch, disruptions)
    config = SimConfig(
        policy="ours-nvl72", memory_per_gpu_gb=10.0, scripted_failures=(down,), checkpoint_interval_s=600.0,
        check_invariants=True,
    )  # fmt: skip
    simulation = Simulation(topology, trace, config)
    simulation.run()
    job = simulation.jobs[KEY]
    assert job.restarts == 1 and simulation.migrations == 1, (job.restarts, simulation.migrations)
    first_move = lambda asked: next(a for a in asked if a[3])  # noqa: E731
    assert first_move(sim_asked) == first_move(operator_asked)
    assert first_move(operator_asked)[2] == 2  # the moved group's two tray pods, not all four

"""A move plan through both shells: the operator (``k8s/plan/moves/roommaking``) and the simulator's
``ours-nvl72-moves`` policy (``sim/run/roommoves``) must put the same question to ``core.moves.plan_moves``
and get the same plan (issue 40: one rule for moves, carried out twice).

Three NVL72 racks of 18 four-GPU trays, 2 warm spares per clique (the simulator policy's; the operator's
queue says so). One-tray jobs arrive one a second, rack by rack, onto the rack left open for them (the
operator: foreign pods on the other racks' free trays; the simulator: those trays down meanwhile): 11, 11 and
10 jobs, so 7, 7 and 8 trays are free, 2 + 2 + 3 two-tray TP groups besides the spares. A TP8 x DP8 job
(16 trays: a whole clique with its spares) arrives at 10 min and fits nowhere. Both shells hand the planner
the same waiting job and bounds, the same running jobs (where, their cost, the work they would lose, whether
movable) on the same topology, and get the same plan: the clique freed, the trays held, each move (job, now
or at its checkpoint, when, the work it loses, its cost after). A shell that forks the rule (its own bounds,
spares, placer budget, pricing of a running job, reading of its checkpoints) makes them differ (a simulator
with 1 spare per clique places the job without asking).
"""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core import moves
from paralleljob.core.cluster import ClusterState
from paralleljob.core.moves import MovePlan, MoveRequest, NoMovePlan
from paralleljob.core.placing.placement import PlacerLike
from paralleljob.core.timing.cost import CostModel
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.plan.admission.trayadmission import nvlink_topology
from paralleljob.k8s.plan.moves import roommaking
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import roommoves
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster

RACKS, TRAYS = 3, 18
ALL = [f"r{r}-t{t:02d}" for r in range(RACKS) for t in range(TRAYS)]
RACK = {r: [n for n in ALL if n.startswith(f"r{r}-")] for r in range(RACKS)}
JOBS_PER_RACK = (11, 11, 10)  # 7, 7 and 8 trays free: 2 + 2 + 3 two-tray TP groups besides the spares
PHASE_S = 20  # rack r's jobs arrive one a second from 10 + 20 r, the other racks closed meanwhile
SMALL = [f"ns/s{i:02d}" for i in range(sum(JOBS_PER_RACK))]
BIG, BIG_AT, INTERVAL = "ns/big", 600, 3600
SPARES = 2  # the ours-nvl72-moves policy's warm spares per clique: the big job needs a whole clique

Asked = tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]  # waiting + bounds, running jobs, the plan


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Asked]:
    asked: list[Asked] = []

    def recording(
        state: ClusterState, placer: PlacerLike, model: CostModel, request: MoveRequest, **how: Any
    ) -> MovePlan | NoMovePlan:
        decision = moves.plan_moves(state, placer, model, request, **how)
        asked.append(_question(state, request, decision))
        return decision

    monkeypatch.setattr(module, "plan_moves", recording)
    return asked


def _question(state: ClusterState, request: MoveRequest, decision: MovePlan | NoMovePlan) -> Asked:
    """The question and answer in the topology's own names, times from the question's ``now``. A running
    job's next checkpoint is left out: the simulator's comes a checkpoint's write time later than the
    interval (its workload model, ``sim/run/work.CheckpointPlan.period_s``), which the operator cannot see; the plan's
    moves say when each moves, and every move here is due now."""
    topo, now = state.topology, request.now
    w = request.waiting
    waiting = (w.job_id, w.tp, w.pp, w.dp, w.priority, request.bounds, request.moves_last_hour, request.relocate)
    running = tuple(
        (
            j.job_id, j.job.num_gpus, j.job.priority, round(j.cost_ms, 6), j.lost_now_gpu_s(now),
            j.last_moved_at, j.movable,
            sorted({topo.node_names[topo.gpu_node[g]] for g in state.allocations[j.job_id].gpus}),
        )
        for j in sorted(request.running, key=lambda j: j.job_id)
    )  # fmt: skip
    if isinstance(decision, NoMovePlan):
        return waiting, running, ("no", decision.reasons)
    plan = (
        decision.domain,
        tuple(topo.node_names[n] for n in decision.held_nodes),
        tuple((m.job_id, m.when, m.at_s - now, m.lost_work_gpu_s, round(m.cost_after_ms, 6)) for m in decision.moves),
        decision.lost_work_gpu_s,
    )
    return waiting, running, plan


def _phases() -> list[tuple[int, list[str]]]:
    out, start = [], 0
    for r, count in enumerate(JOBS_PER_RACK):
        out.append((r, SMALL[start : start + count]))
        start += count
    return out


def _trays_of(fc: FakeCluster, key: str) -> set[str]:
    return set(str(fc.job(key)["status"].get("nodes", "")).split(",")) - {""}


def _operator_run(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Asked], FakeCluster, dict[str, list[int]]]:
    """The operator's run, and per tray the phases it was closed in (the simulator closes the same)."""
    asked = _spy(monkeypatch, roommaking)
    trays = [
        node(name, 4, leaf=f"leaf-{name[:2]}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{name[1]}"})
        for name in ALL
    ]
    fc = FakeCluster(trays, queues={"default": QueueInfo("default", nvlink_spares=SPARES)})
    closed: dict[str, list[int]] = {}
    spec = {"checkpoint": {"intervalSeconds": INTERVAL}}
    for r, keys in _phases():
        taken = set().union(set(), *(_trays_of(fc, k) for k in SMALL if k in fc.jobs))
        shut = [n for n in ALL if not n.startswith(f"r{r}-") and n not in taken]
        for name in shut:
            closed.setdefault(name, []).append(r)
            fc.pods[("other", f"f-{name}")] = foreign_pod(f"f-{name}", name, 4)
        for i, key in enumerate(keys):
            second = 10 + PHASE_S * r + i
            fc.add_job(paralleljob(key.split("/")[1], 4, 1, 1, memory=10.0, created=at(second), extra_spec=spec))
            for _ in range(3):
                fc.step(at(second))
        for name in shut:
            del fc.pods[("other", f"f-{name}")]
    assert all(fc.phase(k) == "Running" for k in SMALL), [(k, fc.job(k)["status"]) for k in SMALL]
    fc.add_job(paralleljob("big", 8, 1, 8, memory=10.0, created=at(BIG_AT), extra_spec=spec))
    for t in range(6):
        fc.step(at(BIG_AT + t))
    return asked, fc, closed


def _simulator_run(monkeypatch: pytest.MonkeyPatch, fc: FakeCluster, closed: dict[str, list[int]]) -> list[Asked]:
    """The same arrivals; a tray closed in a phase is down then (a scripted failure of a tray nobody holds)."""
    assert fc.last_view is not None
    topology = nvlink_topology(fc.last_view)
    assert topology is not None
    small = parse_job(paralleljob("s", 4, 1, 1, memory=10.0)).request
    big = parse_job(paralleljob("big", 8, 1, 8, memory=10.0)).request
    assert small is not None and big is not None
    trace = [
        TraceJob(key, 10.0 + PHASE_S * r + i, 1e6, 4, shape=(4, 1, 1), model=small.spec.model)
        for r, keys in _phases() for i, key in enumerate(keys)
    ] + [TraceJob(BIG, float(BIG_AT), 1e5, 64, shape=(8, 1, 8), model=big.spec.model)]  # fmt: skip
    down = []
    for name, phases in closed.items():  # phase r: [5 + 20 r, 25 + 20 r) s, the first from 0
        for r in phases:
            start = 0.0 if r == 0 else 5.0 + PHASE_S * r
            down.append(
                Failure(start, topology.node_index(name), "node", Scope.NODE, 0, 5.0 + PHASE_S * (r + 1) - start)
            )
    asked = _spy(monkeypatch, roommoves)
    config = SimConfig(
        policy="ours-nvl72-moves", memory_per_gpu_gb=10.0, scripted_failures=tuple(sorted(down, key=lambda f: f.time)),
        checkpoint_interval_s=float(INTERVAL), check_invariants=True, horizon_s=float(BIG_AT + 5),
    )  # fmt: skip
    Simulation(topology, trace, config).run()
    return asked


def test_both_shells_ask_the_planner_the_same_question_and_get_the_same_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    operator_asked, fc, closed = _operator_run(monkeypatch)
    sim_asked = _simulator_run(monkeypatch, fc, closed)
    assert operator_asked and sim_asked, (operator_asked, sim_asked)
    op, sim = operator_asked[0], sim_asked[0]
    assert sim[0] == op[0], "the waiting job and the bounds"
    assert sim[1] == op[1], "the running jobs as the planner sees them"
    assert sim[2] == op[2], "the plan"
    domain, held, planned, _ = op[2]  # a plan, not a no: the clique with the fewest jobs, freed now
    assert str(domain).startswith("clique uuid.2") and len(held) == 16 and len(planned) == 10, op[2]

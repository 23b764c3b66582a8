"""Which running jobs are re-priced for a move back, and when, through both shells: the operator
(``k8s/plan/moves/reoptimizing.reconsider``) and the simulator (``sim/run/disruptions.reoptimize_pass``) must ask
``core.reoptimize.reprice_now`` and act on its answer (issue 39: the simulator re-priced every job placed above
its ideal cost whenever GPUs came free, the operator only a repaired or drained-away job, once a minute; now
both re-price a job that was repaired, drained away or placed above its ideal cost, once a minute).

Each test runs one scenario on the operator's FakeCluster, then the simulator on the operator's topology, with
a spy wrapping ``reprice_now`` in each shell's module; a shell that picked its own candidates or its own
schedule answers otherwise.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from paralleljob.core.reoptimize import RECHECK_SECONDS, MoveBackAsk, Reprice, reprice_now
from paralleljob.core.topology import Topology
from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.parse.queues import parse_time
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.moves import reoptimizing
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import disruptions
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster

NODES = [node(f"gpu-node-{i:03d}", leaf=f"leaf-{i // 2}") for i in range(4)]
CHECKPOINTS = {"checkpoint": {"intervalSeconds": 600}}
Asked = tuple[str, float, bool, str]  # job name, when, re-price now, why (numbers as N)


def at(seconds: float) -> str:
    s = int(seconds)
    return f"2024-01-01T{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z"


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, job: str) -> list[Asked]:
    """Every question a shell puts to ``reprice_now`` (each scenario has one job it may ask about), when, and
    the answer."""
    asked: list[Asked] = []

    def recording(ask: MoveBackAsk, now_s: float, *args: Any) -> Reprice:
        verdict = reprice_now(ask, now_s, *args)
        asked.append((job, now_s, verdict.now, re.sub(r"\d+", "N", verdict.why)))
        return verdict

    monkeypatch.setattr(module, "reprice_now", recording)
    return asked


def _topology(fc: FakeCluster) -> Topology:
    assert fc.last_view is not None and fc.last_view.state is not None
    return fc.last_view.state.topology


def _model(name: str) -> Any:
    request = parse_job(paralleljob(name, 8, 1, 2, memory=0.0)).request
    assert request is not None
    return request.spec.model


def _repriced(asked: list[Asked], job: str) -> list[float]:
    return [t for name, t, now, _ in asked if name == job and now]


def _said(asked: list[Asked], *aside: str) -> set[tuple[str, bool, str]]:
    """What each job was told, "not running" and ``aside`` left out (a shell asks while a job restarts only
    if a pass falls then: the operator in the pass that sees its pods bound again, the simulator when an
    event wakes it)."""
    return {(name, now, why) for name, _, now, why in asked if not why.startswith(("not running", *aside))}


def test_a_job_placed_dear_but_never_repaired_is_repriced_and_moved_back_in_both_shells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two leaves of two 8-GPU nodes. Fillers hold gpu-node-000, -001 (leaf 0) and -002 (leaf 1); -001's ends,
    # and ``d`` (TP8 x DP2, a checkpoint every 600 s) arrives: the free nodes are -001 and -003, so it runs
    # across the leaves, above its ideal cost. Then -002's filler ends: ``d`` could run whole in leaf 1. It was
    # never repaired nor drained away, but it is placed dear, so both shells re-price it
    # (core.reoptimize.reprice_now) and move it into leaf 1 at its next checkpoint.
    fc = FakeCluster(list(NODES), memo=True)  # as the reconciler runs it: steady running jobs are left out
    operator = _spy(monkeypatch, reoptimizing, "d")
    for n in range(3):
        fc.pods[("other", f"x{n}")] = foreign_pod(f"x{n}", f"gpu-node-{n:03d}", 8)
    del fc.pods[("other", "x1")]
    fc.add_job(paralleljob("d", 8, 1, 2, memory=0.0, created=at(0), extra_spec=CHECKPOINTS))
    for second in range(4):
        fc.step(at(second))
    first = record_from_status(fc.job("ns/d")["status"])
    assert first is not None and set(first.nodes) == {"gpu-node-001", "gpu-node-003"}
    del fc.pods[("other", "x2")]
    for second in range(10, 900, 30):
        fc.step(at(second))
    after = record_from_status(fc.job("ns/d")["status"])
    assert after is not None and set(after.nodes) == {"gpu-node-002", "gpu-node-003"}, after.nodes
    assert fc.phase("ns/d") == "Running" and fc.job("ns/d")["status"]["restarts"] == 0
    # the replica on -003 stays there (core.failure.keepreplicas): one pod lands on a new node, not both
    assert fc.job("ns/d")["status"]["lastMigration"]["podsMoved"] == 1
    stayed = [i for i, slot in enumerate(first.slots) if slot.node == "gpu-node-003"]
    assert [after.slots[i].node for i in stayed] == ["gpu-node-003"], after.slots

    monkeypatch.undo()
    simulated = _spy(monkeypatch, disruptions, "d")
    model = _model("d")
    trace = [
        TraceJob("ns/x0", 0.0, 1e6, 8, shape=(8, 1, 1)),
        TraceJob("ns/x1", 1.0, 100.0, 8, shape=(8, 1, 1)),
        TraceJob("ns/x2", 2.0, 1_000.0, 8, shape=(8, 1, 1)),
        TraceJob("ns/d", 200.0, 5e4, 16, shape=(8, 1, 2), model=model),
        # larger than the cluster: refused as it arrives, in a pass soon after d starts (d is asked then)
        TraceJob("ns/big", 230.0, 10.0, 64, shape=(8, 1, 8)),
    ]
    config = SimConfig(policy="ours-reopt", checkpoint_interval_s=600.0, check_invariants=True)
    simulation = Simulation(_topology(fc), trace, config)
    simulation.run()
    d = simulation.jobs["ns/d"]
    assert d.first_cost_ms is not None and d.first_cost_ms > simulation.ideal.total_ms(d.spec), "placed dear"
    assert simulation.migrations == 1 and d.placements == 2 and d.restarts == 0

    # Re-priced although never repaired, first a recheck interval after it began running: the placer had just
    # chosen its placement (the operator passes every 30 s and asks before that too).
    operator_start = parse_time(fc.job("ns/d")["status"]["startTime"])
    assert operator_start is not None and d.first_start is not None
    for asked, started in ((operator, operator_start), (simulated, d.first_start)):
        first = next((t, why) for _, t, now, why in asked if now)
        assert first[1] == "not priced since it was last placed" and first[0] - started >= RECHECK_SECONDS, asked
    for asked in (operator, simulated):
        assert ("d", False, "placed dear N s ago, the best then; priced after N s") in _said(asked), asked
    # moved to its ideal placement, it is no candidate any more (the simulator asks only about jobs placed dear)
    assert operator[-1][2:] == (False, "at its ideal cost, never repaired nor drained away: no placement is cheaper")


def test_a_repaired_job_is_repriced_at_most_once_a_minute_in_both_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two leaves of two 8-GPU nodes. ``r`` (TP8 x DP2) runs in one leaf; a 4-GPU job holds half a node of the
    # other. A node under ``r`` goes down for good, so its TP group moves to the other leaf (minimal repair,
    # restarts 1) and it runs above its ideal cost with no cheaper room to go to. Both shells re-price it, at
    # most every RECHECK_SECONDS, although the operator passes every 10 s and the simulator's small jobs free
    # GPUs next to it every 20 s.
    fc = FakeCluster(list(NODES))
    fc.pods[("other", "b")] = foreign_pod("b", "gpu-node-003", 4)
    operator = _spy(monkeypatch, reoptimizing, "r")
    fc.add_job(
        paralleljob("r", 8, 1, 2, memory=0.0, created=at(0), extra_spec={"checkpoint": {"intervalSeconds": 600}})
    )
    for second in range(4):
        fc.step(at(second))
    down = fc.job("ns/r")["status"]["placement"]["pods"][0]["node"]
    index = int(down.split("-")[-1])
    fc.nodes[down] = node(down, leaf=f"leaf-{index // 2}", ready=False)
    for second in range(4, 10):
        fc.step(at(second))
    assert fc.job("ns/r")["status"]["restarts"] == 1 and fc.phase("ns/r") == "Running"
    fc.job("ns/r")["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(5)}
    for second in range(10, 400, 10):
        fc.step(at(second))

    monkeypatch.undo()
    simulated = _spy(monkeypatch, disruptions, "r")
    model = _model("r")
    fillers = [TraceJob(f"ns/f{n}", 1_000.0 + 20.0 * n, 15.0, 1, shape=(1, 1, 1)) for n in range(20)]
    blocker = TraceJob("ns/b", 1.0, 1e6, 4, shape=(4, 1, 1))
    trace = [TraceJob("ns/r", 0.0, 1e5, 16, shape=(8, 1, 2), model=model), blocker, *fillers]
    failure = Failure(900.0, _topology(fc).node_index(down), "node", Scope.NODE, 0, 1e9)
    config = SimConfig(
        policy="ours-reopt", checkpoint_interval_s=600.0, scripted_failures=(failure,), check_invariants=True
    )
    simulation = Simulation(_topology(fc), trace, config)
    simulation.run()
    assert simulation.jobs["ns/r"].restarts == 1 and simulation.migrations == 0

    for asked in (operator, simulated):
        times = _repriced(asked, "r")
        assert len(times) >= 3, asked
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= RECHECK_SECONDS, gaps
    assert any(not now and why.startswith("priced") for _, _, now, why in simulated), "passes came between"
    # the operator asks before the failure too, while it is at its ideal cost
    assert _said(operator, "at its ideal cost") == _said(simulated, "at its ideal cost")

"""Every kind of ParallelJob status the operator writes, produced by its own pure pass, for the round trip
through the real API server (``tests/e2e/test_status_roundtrip_e2e.py``).

The API server prunes status fields its CRD does not declare, silently; a pruned field the operator keeps
wanting to write turned repaired jobs into a reconcile loop. ``written_status_fields()`` reads the plan's
source for the top-level fields it can write (``draft.set(field=...)`` and ``draft.data["field"]``), and
``statuses()`` runs scenarios through the harness until every one of them has been written at least once
(``tests/k8s/test_status_corpus.py`` checks that), so a field added to the operator without a scenario
here, or without the CRD declaring it, fails a test.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paralleljob.k8s.plan as plan_package
from paralleljob.clitools.drain import plan as drain_plan
from paralleljob.core.reoptimize import RECHECK_SECONDS
from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.parse.queues import queue_policy
from paralleljob.k8s.edge.status.records import record_from_status
from tests.k8s import test_tray_room_moves as room
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.migworld import MIG_NODE, dra_node, mig_overlay

PLAN_DIR = Path(plan_package.__file__).parent


def written_status_fields() -> set[str]:
    """Top-level status fields the plan writes: keyword names of ``<draft>.set(...)`` calls and string
    subscripts assigned on ``<draft>.data``."""
    fields: set[str] = set()
    for path in sorted(PLAN_DIR.rglob("*.py")):
        for node_ in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node_, ast.Call)
                and isinstance(node_.func, ast.Attribute)
                and node_.func.attr == "set"
                and _is_draft(node_.func.value)
            ):
                fields.update(k.arg for k in node_.keywords if k.arg is not None)
            if isinstance(node_, ast.Assign):
                for target in node_.targets:
                    if (
                        isinstance(target, ast.Subscript)
                        and isinstance(target.value, ast.Attribute)
                        and target.value.attr == "data"
                        and isinstance(target.slice, ast.Constant)
                        and isinstance(target.slice.value, str)
                    ):
                        fields.add(target.slice.value)
    return fields


def _is_draft(value: ast.expr) -> bool:
    """``draft``, ``self``, ``actions.draft`` or ``x.draft``: the status draft (``set`` of other things are
    not status writes)."""
    if isinstance(value, ast.Name):
        return value.id in ("draft",)
    return isinstance(value, ast.Attribute) and value.attr == "draft"


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


class Recorder:
    """A harness cluster that keeps every status its passes wrote, in order."""

    def __init__(self, fc: FakeCluster) -> None:
        self.fc = fc
        self.written: list[dict[str, Any]] = []

    def step(self, now: str | None = None) -> None:
        plan = self.fc.step(now)
        self.written.extend(copy.deepcopy(a.draft.data) for a in plan.jobs if a.writes_status)


def _completed_and_queued() -> Iterator[dict[str, Any]]:
    rec = Recorder(FakeCluster([node("n0")]))
    rec.fc.add_job(paralleljob("a", 8, 1, 1, created=at(0), extra_spec={"checkpoint": {"costSeconds": 30}}))
    rec.fc.add_job(paralleljob("b", 8, 1, 1, created=at(1)))
    rec.fc.add_job(paralleljob("huge", 16, 1, 1, created=at(2)))  # never fits: Failed, completionTime
    for second in range(4):
        rec.step(at(second))
    for pod in rec.fc.job_pods("ns/a"):
        pod["status"]["phase"] = "Succeeded"
    for second in range(4, 8):
        rec.step(at(second))
    yield from rec.written


def _one_worker_finished_first() -> Iterator[dict[str, Any]]:
    """A worker exits 0 while the other runs (``succeededPods``), then the other, and the job completes."""
    rec = Recorder(FakeCluster([node("n0"), node("n1")]))
    rec.fc.add_job(paralleljob("a", 8, 2, 1, created=at(0)))
    for second in range(3):
        rec.step(at(second))
    first, second_pod = rec.fc.job_pods("ns/a")
    first["status"]["phase"] = "Succeeded"
    rec.step(at(3))
    second_pod["status"]["phase"] = "Succeeded"
    rec.step(at(4))
    yield from rec.written


def _repaired_then_migrated() -> Iterator[dict[str, Any]]:
    """A repair that splits a stage over two nodes, a proposal to move back, the move at a checkpoint."""
    fc = FakeCluster([node(n, leaf="leaf-00") for n in ("a", "b", "c", "d")])
    fc.pods[("other", "x")] = foreign_pod("x", "c", 4)
    fc.pods[("other", "y")] = foreign_pod("y", "d", 4)
    spec = {"checkpoint": {"intervalSeconds": 3600}, "failurePolicy": {"reoptimize": "MigrateAtCheckpoint"}}
    fc.add_job(paralleljob("seed", 4, 2, 2, memory=70.0, extra_spec=spec))
    rec = Recorder(fc)
    for _ in range(4):
        rec.step(at(0))
    record = record_from_status(fc.job("ns/seed")["status"])
    assert record is not None
    stage0 = next(s.node for s in record.slots if s.stage == 0)
    fc.nodes[stage0] = node(stage0, leaf="leaf-00", ready=False)
    for _ in range(4):
        rec.step(at(10))
    fc.nodes[stage0] = node(stage0, leaf="leaf-00")
    propose = 10 + int(RECHECK_SECONDS) + 1
    rec.step(at(propose))
    fc.job("ns/seed")["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(propose + 40)}
    for _ in range(5):
        rec.step(at(propose + 50))
    yield from rec.written


def _preempted() -> Iterator[dict[str, Any]]:
    rec = Recorder(FakeCluster([node("n0")], policy=queue_policy("fair-backfill-preempt", 5)))
    rec.fc.add_job(paralleljob("lo", 8, 1, 1, priority=0))
    rec.step(at(0))
    rec.step(at(1))
    rec.fc.add_job(paralleljob("hi", 8, 1, 1, priority=10, created=at(2)))
    for second in (2, 3, 7, 8, 9):
        rec.step(at(second))
    yield from rec.written


def _gave_up_and_requeued() -> Iterator[dict[str, Any]]:
    rec = Recorder(FakeCluster([node("n0"), node("n1")]))
    rec.fc.add_job(paralleljob("once", 8, 1, 1, max_restarts=0, created=at(0)))
    rec.fc.add_job(paralleljob("again", 8, 1, 1, created=at(1)))
    for second in range(3):
        rec.step(at(second))
    for name in ("n0", "n1"):
        rec.fc.nodes[name] = node(name, ready=False)
    for second in range(3, 6):
        rec.step(at(second))
    yield from rec.written


def _elastic_grew_and_shrank() -> Iterator[dict[str, Any]]:
    """An elastic job admitted at what fits, grown when room frees, shrunk for a higher-priority job."""
    rec = Recorder(FakeCluster([node(f"n{i}") for i in range(3)]))
    rec.fc.add_job(paralleljob("filler", 8, 1, 1, created=at(0)))
    rec.step(at(0))
    body = paralleljob("el", 8, 1, 3, created=at(1))
    body["spec"]["parallelism"].update(minData=1, maxData=3)
    rec.fc.add_job(body)
    for second in range(1, 4):
        rec.step(at(second))
    del rec.fc.jobs["ns/filler"]
    for second in range(4, 7):
        rec.step(at(second))
    rec.fc.add_job(paralleljob("urgent", 8, 1, 1, priority=5, created=at(7)))
    for second in range(7, 10):
        rec.step(at(second))
    yield from rec.written


def _drained_then_moved() -> Iterator[dict[str, Any]]:
    """A drain: the checkpoint request (``status.drain``), then the move (``status.lastDrain``)."""
    rec = Recorder(FakeCluster([node("n0"), node("n1")]))
    rec.fc.add_job(paralleljob("kept", 8, 1, 1, created=at(0)))
    for second in range(3):
        rec.step(at(second))
    where = rec.fc.job("ns/kept")["status"]["nodes"]
    patch = drain_plan(rec.fc.nodes[where], None).patch
    body = copy.deepcopy(rec.fc.nodes[where])
    body["metadata"]["annotations"].update({k: v for k, v in patch["metadata"]["annotations"].items() if v})
    body["spec"].update(patch["spec"])
    rec.fc.nodes[where] = body
    for second in (3, 4, 60, 61, 62):
        rec.step(at(second))
    yield from rec.written


def _moved_for_room() -> Iterator[dict[str, Any]]:
    """Moves that free a clique (``plan/moves/roommaking``): the waiting job's plan (``status.movePlan``), the moved
    jobs' record (``lastRoomMove``), and a job no plan helps (``moveCheck``)."""
    fc = room.scattered(interval=7200)
    rec = Recorder(fc)
    room.add_big(fc, 6000)
    for second in range(6000, 6003):
        rec.step(at(second))
    for move in fc.job(room.BIG)["status"]["movePlan"]["moves"]:
        fc.job(move["job"])["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(7200)}
    for second in range(7210, 7218):
        rec.step(at(second))
    yield from rec.written
    refused = Recorder(room.scattered(small_priority=5))  # no plan: every job in the way has a higher priority
    room.add_big(refused.fc, 600)
    for second in range(600, 603):
        refused.step(at(second))
    yield from refused.written


def _on_mig_slices() -> Iterator[dict[str, Any]]:
    """Slice jobs packed on one GPU of a MIG node (``status.placement.pods[].migSlice``), and the GPU failing
    under them: one fails (maxRestarts 0), the other's slice moves."""
    with mig_overlay():
        rec = Recorder(FakeCluster([dra_node()]))
        sharing = {"gpuSharing": {"migProfile": "1g.10gb"}}
        rec.fc.add_job(paralleljob("s0", 1, 1, 2, memory=0, max_restarts=0, created=at(0), extra_spec=sharing))
        rec.fc.add_job(paralleljob("s1", 1, 1, 1, memory=0, created=at(1), extra_spec=sharing))
        for second in range(3):
            rec.step(at(second))
        gpu = rec.fc.job("ns/s1")["status"]["placement"]["pods"][0]["gpuIndices"][0]
        rec.fc.nodes[MIG_NODE] = dra_node(unhealthy=str(gpu))
        for second in range(3, 6):
            rec.step(at(second))
    yield from rec.written


def _on_mps_shares() -> Iterator[dict[str, Any]]:
    """Share jobs on one GPU of a DRA node (``status.placement.pods[].mpsShare``), and the GPU failing under
    them: one fails (maxRestarts 0), the other's share moves."""
    with mig_overlay():
        rec = Recorder(FakeCluster([dra_node()]))
        sharing = {"gpuSharing": {"mps": {"percent": 25}}}
        rec.fc.add_job(paralleljob("m0", 1, 1, 2, memory=0, max_restarts=0, created=at(0), extra_spec=sharing))
        rec.fc.add_job(paralleljob("m1", 1, 1, 1, memory=0, created=at(1), extra_spec=sharing))
        for second in range(3):
            rec.step(at(second))
        gpu = rec.fc.job("ns/m1")["status"]["placement"]["pods"][0]["gpuIndices"][0]
        rec.fc.nodes[MIG_NODE] = dra_node(unhealthy=str(gpu))
        for second in range(3, 6):
            rec.step(at(second))
    yield from rec.written


SCENARIOS = (
    _completed_and_queued,
    _one_worker_finished_first,
    _repaired_then_migrated,
    _preempted,
    _gave_up_and_requeued,
    _elastic_grew_and_shrank,
    _drained_then_moved,
    _moved_for_room,
    _on_mig_slices,
    _on_mps_shares,
)


def statuses() -> list[dict[str, Any]]:
    """Every distinct status written in the scenarios, in order."""
    seen: set[str] = set()
    unique: list[dict[str, Any]] = []
    for scenario in SCENARIOS:
        for status in scenario():
            key = repr(sorted(status.items(), key=lambda kv: kv[0]))
            if key not in seen:
                seen.add(key)
                unique.append(status)
    return unique

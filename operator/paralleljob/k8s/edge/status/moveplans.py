"""A plan to free room by moving jobs, as the waiting job's ``status.movePlan`` records it, and a moved job's
``status.lastRoomMove``: written by ``plan/moves/roommaking`` and read back from there on every pass (so an
operator that restarts mid-plan resumes it). :func:`moves_of` parses all three move fields (the plan, the
last answer, the last move) once for every surface that shows them: ``describe``, the web view's job panel
and its snapshot's job list read the same :class:`JobMoves` and its JSON.

Only what cannot be seen again is kept: when the plan was made, the domain, the nodes held (by name), and
each move (the job, when it was due, the work it was to lose). Whether a move is done is not: a moved job
no longer holds GPUs on the held nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.core.moves import MoveWhen
from paralleljob.k8s.edge.parse.queues import format_time, parse_time


@dataclass(frozen=True, slots=True)
class PlannedMove:
    job: str  # namespace/name
    when: MoveWhen
    at_s: float  # when it was due (AT_END: when it was expected to end)
    lost_gpu_s: float


@dataclass(frozen=True, slots=True)
class MovePlanRecord:
    created_s: float
    domain: str
    held_nodes: tuple[str, ...]
    moves: tuple[PlannedMove, ...]
    lost_gpu_s: float
    message: str


def plan_to_status(plan: MovePlanRecord) -> dict[str, Any]:
    return {
        "createdAt": format_time(plan.created_s),
        "domain": plan.domain,
        "heldNodes": list(plan.held_nodes),
        "moves": [
            {"job": m.job, "when": m.when.value, "at": format_time(m.at_s), "lostGpuSeconds": round(m.lost_gpu_s, 1)}
            for m in plan.moves
        ],
        "lostGpuSeconds": round(plan.lost_gpu_s, 1),
        "message": plan.message,
    }


def plan_from_status(status: Mapping[str, Any]) -> MovePlanRecord | None:
    """The recorded plan, or None (none, or one this operator cannot read: then it is as if dropped)."""
    data = status.get("movePlan")
    if not isinstance(data, Mapping):
        return None
    created = parse_time(data.get("createdAt"))
    nodes = data.get("heldNodes")
    moves = data.get("moves")
    if created is None or not isinstance(nodes, list) or not isinstance(moves, list):
        return None
    parsed = []
    for move in moves:
        if not isinstance(move, Mapping) or move.get("when") not in {w.value for w in MoveWhen}:
            return None
        at = parse_time(move.get("at"))
        lost = move.get("lostGpuSeconds", 0.0)
        if at is None or not isinstance(move.get("job"), str) or not isinstance(lost, int | float):
            return None
        parsed.append(PlannedMove(move["job"], MoveWhen(move["when"]), at, float(lost)))
    lost_all = data.get("lostGpuSeconds", 0.0)
    return MovePlanRecord(
        created,
        str(data.get("domain", "")),
        tuple(str(n) for n in nodes),
        tuple(parsed),
        float(lost_all) if isinstance(lost_all, int | float) else 0.0,
        str(data.get("message", "")),
    )


def last_room_move(status: Mapping[str, Any]) -> float | None:
    """When the job was last moved to free room for another (``status.lastRoomMove.time``), or None."""
    data = status.get("lastRoomMove")
    return parse_time(data.get("time")) if isinstance(data, Mapping) else None


def last_moved(status: Mapping[str, Any]) -> float | None:
    """When the job was last moved at all, for room or back to a better placement (the cool-down's start)."""
    migration = status.get("lastMigration")
    times = [last_room_move(status), parse_time(migration.get("time")) if isinstance(migration, Mapping) else None]
    found = [t for t in times if t is not None]
    return max(found) if found else None


@dataclass(frozen=True, slots=True)
class MoveCheck:
    """The last "no plan" or dropped plan (``status.moveCheck``): when, and why."""

    checked_s: float | None
    answer: str


@dataclass(frozen=True, slots=True)
class RoomMove:
    """A moved job's last move for room (``status.lastRoomMove``): when, for whom, which domain, work lost."""

    time_s: float
    made_room_for: str
    domain: str
    lost_gpu_s: float


@dataclass(frozen=True, slots=True)
class JobMoves:
    """What a job's status says of moves that free room, parsed once for every surface."""

    plan: MovePlanRecord | None = None
    check: MoveCheck | None = None
    last: RoomMove | None = None

    @property
    def empty(self) -> bool:
        return self.plan is None and self.check is None and self.last is None

    def to_json(self) -> dict[str, Any]:
        """The whole record: ``describe -o json`` and the web view's job panel."""
        return {
            "plan": plan_to_status(self.plan) if self.plan is not None else None,
            "check": _check_json(self.check) if self.check is not None else None,
            "lastRoomMove": _last_json(self.last) if self.last is not None else None,
        }

    def brief(self) -> dict[str, Any]:
        """A few numbers for the web view's job list (sent with every snapshot): only the parts there are."""
        out: dict[str, Any] = {}
        if self.plan is not None:
            out["plan"] = {
                "domain": self.plan.domain,
                "moves": len(self.plan.moves),
                "heldNodes": len(self.plan.held_nodes),
                "lostGpuSeconds": round(self.plan.lost_gpu_s, 1),
            }
        if self.last is not None:
            out["lastRoomMove"] = _last_json(self.last)
        return out


def _check_json(check: MoveCheck) -> dict[str, Any]:
    return {"checkedAt": format_time(check.checked_s) if check.checked_s is not None else "", "answer": check.answer}


def _last_json(last: RoomMove) -> dict[str, Any]:
    return {
        "time": format_time(last.time_s),
        "for": last.made_room_for,
        "domain": last.domain,
        "lostGpuSeconds": round(last.lost_gpu_s, 1),
    }


def moves_of(status: Mapping[str, Any]) -> JobMoves:
    """The move fields of a job's status; a field this operator cannot read is left out (as if absent)."""
    check = status.get("moveCheck")
    found_check = None
    if isinstance(check, Mapping) and isinstance(check.get("answer"), str):
        found_check = MoveCheck(parse_time(check.get("checkedAt")), check["answer"])
    last = status.get("lastRoomMove")
    found_last = None
    if isinstance(last, Mapping) and (when := parse_time(last.get("time"))) is not None:
        lost = last.get("lostGpuSeconds", 0.0)
        found_last = RoomMove(
            when,
            str(last.get("for", "")),
            str(last.get("domain", "")),
            float(lost) if isinstance(lost, int | float) and not isinstance(lost, bool) else 0.0,
        )
    return JobMoves(plan_from_status(status), found_check, found_last)

"""What a move plan is made of, and the rules that apply to each job alone (``core/moves`` searches with them).

The values both shells hand the planner and get back: a queue's :class:`MoveBounds`, a running job as the
planner sees it (:class:`MovableJob`), the question (:class:`MoveRequest`) and the answer (:class:`MovePlan`
of :class:`Move` values, or :class:`NoMovePlan` saying why). The per-job rules: whether a job may be moved
for the waiting one (:func:`eligibility`), when and at what price (:func:`move_timing`), where it goes
(:func:`place_elsewhere`, never dearer than the bound) and how many free GPUs a placer could give the waiting
job at all (:func:`usable_free`: the free GPUs less those it holds back, such as the NVLink placer's warm
spare trays, which no move makes usable).

Pure and synchronous: values in, values out.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from paralleljob.core.cluster import ClusterState, closed_nodes
from paralleljob.core.errors import InvalidRequest, PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import CostModel

COST_SLACK = 1e-9  # relative: a placement of equal cost is "not dearer" despite rounding


class MoveWhen(enum.Enum):
    NOW = "now"  # its lost work is under the bound: stop it and re-place it at once
    AT_CHECKPOINT = "at-checkpoint"  # right after its next checkpoint: nothing is lost
    AT_END = "at-end"  # it ends before its next checkpoint: not moved, the plan waits for it


@dataclass(frozen=True, slots=True)
class MoveBounds:
    """A queue's bounds on moving its jobs out of the way (defaults: the simulator's, docs/simulator.md)."""

    max_extra_cost_ratio: float = 0.0  # a moved job's new cost <= its cost x (1 + this)
    move_now_max_lost_gpu_s: float = 14400.0  # lost work under which a job moves at once (4 GPU-hours)
    # a job that could move (at its checkpoint) or end only later than this is left alone: a plan that waits
    # hours is a reservation, and holding its GPUs idle that long costs more than it frees
    max_wait_s: float = 1800.0
    cooldown_s: float = 3600.0  # a job moved less than this ago stays
    max_moves_per_hour: int = 20  # the disruption budget, the moves of the past hour included

    def __post_init__(self) -> None:
        for name in ("max_extra_cost_ratio", "move_now_max_lost_gpu_s", "max_wait_s", "cooldown_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidRequest(f"MoveBounds.{name} must be a finite number >= 0, got {value!r}")
        if self.max_moves_per_hour < 0:
            raise InvalidRequest(f"MoveBounds.max_moves_per_hour must be >= 0, got {self.max_moves_per_hour}")


@dataclass(frozen=True, slots=True)
class MovableJob:
    """A running job as the planner sees it. ``movable`` False (with ``why_not``): its pods' owner does not
    allow moving, or it is not running yet."""

    job: JobSpec
    cost_ms: float  # the price of its current placement
    started_at: float
    checkpoint_interval_s: float = math.inf  # inf: never checkpoints
    last_checkpoint_at: float | None = None
    last_moved_at: float | None = None
    expected_end_at: float | None = None
    movable: bool = True
    why_not: str = ""
    # nodes it may not move to, whatever the plan: a job whose pods are whole trays stays on cliques' trays
    keep_off: tuple[int, ...] = ()

    @property
    def job_id(self) -> str:
        return self.job.job_id

    def lost_now_gpu_s(self, now: float) -> float:
        since = self.last_checkpoint_at if self.last_checkpoint_at is not None else self.started_at
        return max(0.0, now - since) * self.job.num_gpus

    def next_checkpoint_at(self, now: float) -> float:
        if math.isinf(self.checkpoint_interval_s):
            return math.inf
        since = self.last_checkpoint_at if self.last_checkpoint_at is not None else self.started_at
        return max(now, since + self.checkpoint_interval_s)


@dataclass(frozen=True, slots=True)
class MoveRequest:
    """What the planner decides on: the waiting job, the running jobs (every job on the state's GPUs that may
    be moved; others are simply in the way), the queue's bounds, the time, the moves of the past hour, and the
    nodes already held for other waiting jobs (never refilled)."""

    waiting: JobSpec
    running: tuple[MovableJob, ...]
    bounds: MoveBounds
    now: float
    moves_last_hour: int = 0
    held_nodes: frozenset[int] = frozenset()
    relocate: bool = True  # False: stop the jobs in the way instead (the preemption baseline)


@dataclass(frozen=True, slots=True)
class Move:
    job_id: str
    when: MoveWhen
    at_s: float  # when it moves (AT_END: when it is expected to end)
    lost_work_gpu_s: float
    placement: Placement | None  # where it goes (None: stopped, or AT_END)
    cost_before_ms: float
    cost_after_ms: float


@dataclass(frozen=True, slots=True)
class MovePlan:
    waiting_job: str
    domain: str  # the domain freed, in words ("clique clique-3")
    held_nodes: tuple[int, ...]  # the nodes the waiting job will take: nothing else goes there meanwhile
    moves: tuple[Move, ...]
    placement: Placement  # where the waiting job goes once the moves are done
    ready_at: float  # when the last move is due
    lost_work_gpu_s: float
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NoMovePlan:
    waiting_job: str
    reasons: tuple[str, ...]


def within_bound(before_ms: float, after_ms: float, bounds: MoveBounds) -> bool:
    return after_ms <= before_ms * (1.0 + bounds.max_extra_cost_ratio) * (1.0 + COST_SLACK) + COST_SLACK


def place_elsewhere(
    state: ClusterState,
    placer: PlacerLike,
    model: CostModel,
    job: MovableJob,
    avoid: Sequence[int],
    bounds: MoveBounds,
) -> Placement | str:
    """Where a moved job goes with ``avoid`` closed, its own GPUs free; or why it cannot move. Used by the
    planner and, when the move is carried out later, by the shells (the cluster changed meanwhile)."""
    held = state.allocations.get(job.job_id)
    if held is not None:
        state.release(job.job_id)
    try:
        with closed_nodes(state, (*avoid, *job.keep_off)):
            placement = placer.place(job.job, model)
    except PlacementInfeasible as exc:
        return f"{job.job_id} has no placement elsewhere ({exc.reasons[0] if exc.reasons else 'no room'})"
    finally:
        if held is not None:
            state.allocate(held)
    if not within_bound(job.cost_ms, placement.cost.total_ms, bounds):
        return (
            f"{job.job_id} would cost {placement.cost.total_ms:.3f} ms elsewhere, above"
            f" {1 + bounds.max_extra_cost_ratio:g}x its {job.cost_ms:.3f} ms"
        )
    return placement


def move_timing(job: MovableJob, request: MoveRequest) -> tuple[MoveWhen, float, float, float]:
    """(when, at, lost GPU-seconds, price): the price ranks plans, lost work or GPUs x the wait."""
    now, bounds = request.now, request.bounds
    lost = job.lost_now_gpu_s(now)
    if lost <= bounds.move_now_max_lost_gpu_s or not request.relocate:
        return MoveWhen.NOW, now, lost, lost
    at = job.next_checkpoint_at(now)
    end = job.expected_end_at if job.expected_end_at is not None else math.inf
    if end <= at:
        return MoveWhen.AT_END, end, 0.0, (end - now) * job.job.num_gpus
    if math.isinf(at):  # never checkpoints and no end in sight: only moving now is possible
        return MoveWhen.NOW, now, lost, lost
    return MoveWhen.AT_CHECKPOINT, at, 0.0, (at - now) * job.job.num_gpus


def eligibility(job: MovableJob, request: MoveRequest) -> str | None:
    """Why ``job`` may not be moved for the waiting job, or None."""
    if not job.movable:
        return f"{job.job_id} cannot be moved: {job.why_not or 'its owner does not allow it'}"
    if job.job.priority > request.waiting.priority:
        return f"{job.job_id} has priority {job.job.priority} > {request.waiting.priority}"
    moved = job.last_moved_at
    if moved is not None and request.now - moved < request.bounds.cooldown_s:
        return f"{job.job_id} moved {request.now - moved:.0f} s ago (cool-down {request.bounds.cooldown_s:.0f} s)"
    return None


@runtime_checkable
class HoldsBack(Protocol):
    """A placer that keeps some free GPUs from every new job: the NVLink placer's warm spare trays."""

    def held_back_gpus(self, memory_gb: float) -> int: ...


def usable_free(state: ClusterState, placer: PlacerLike, waiting: JobSpec) -> int:
    """The free GPUs (of schedulable nodes) ``placer`` could ever give ``waiting``: less those it holds back.
    Moves turn part-free nodes into whole ones, never a held-back GPU into a usable one."""
    free = state.counts()["free"]
    if isinstance(placer, HoldsBack):
        free -= placer.held_back_gpus(waiting.memory_per_gpu_gb)
    return max(0, free)


def ends_in_time(expected_end_at: float | None, now: float, bounds: MoveBounds) -> bool:
    """A running job expected to end within ``max_wait_s``: a plan may wait for it."""
    return expected_end_at is not None and expected_end_at <= now + bounds.max_wait_s


def ending_soon_gpus(request: MoveRequest) -> int:
    """GPUs of the running jobs a plan may wait for (:func:`ends_in_time`)."""
    return sum(j.job.num_gpus for j in request.running if ends_in_time(j.expected_end_at, request.now, request.bounds))

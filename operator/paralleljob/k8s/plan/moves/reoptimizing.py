"""Moving a repaired job back: the operator's half of re-optimisation.

A repair places the broken part of a job on whatever was free at that moment, and the job then runs at
that cost until it ends, even after the hardware is back (the faults issue saw a 1,024-GPU job go from 5.3 s
to 21 s per step and stay there); a job admitted while the cluster was fragmented runs above its ideal cost
(``core.timing.ideal``: its best placement on the empty cluster) for the same reason. So every running job
that was repaired, or placed above its ideal cost, is re-priced now and then (which jobs and how often:
``core.reoptimize.reprice_now``, the simulator's rule too; at most once a minute, by the runtime's memory of
each re-price, ``PassContext.repriced_at``; ``status.reoptimization`` is written when the verdict changes):
the placer's best placement for it now, with its own GPUs counted as free, against what it runs on. The
core's rule (``core.reoptimize``) says whether moving is worth it next to the job's checkpoint interval.

- A worthwhile move is *proposed*: condition ``Reoptimizable=True`` with the numbers, and
  ``status.reoptimization`` (``proposedAt``, costs, pods to move); the gauge
  ``paralleljob_reoptimizable_jobs`` counts such jobs.
- With ``failurePolicy.reoptimize: MigrateAtCheckpoint`` (the default: the simulator found minimal
  recovery plus this move-back the best policy, docs/simulator.md) the job is *moved* at its first
  checkpoint boundary after the proposal (its ``paralleljob.dev/last-checkpoint`` annotation, else the
  latest multiple of ``checkpoint.intervalSeconds``): the best placement is recomputed, recorded, and the
  whole gang restarts there from that checkpoint (phase Recovering until all pods are bound again). A job
  that declares neither never moves (no boundary is known); ``Propose`` only reports.
- A job that a drain pushed off its placement (``draining.drained_away``: ``status.lastDrain`` newer than any
  migration) is re-priced the same way although it was never restarted, and the core's rule 4 lets it move
  back even if it never checkpoints (then only for a large gain). Its safe point is the drain's own: once the
  move is proposed its pods get the checkpoint-now signal (``preempting.request_checkpoint``) and it moves at
  its next checkpoint or when the grace period ends, whichever comes first.

A tray job (NVL72) is priced over whole trays by the NVLink placer, warm spares held back as for a new gang,
and a move re-creates every tray pod on its new tray; pod groups are not moved (their pods are another
controller's).

Everything here is a decision on the pass's view, like a repair: the caller brings the pods in line with
the record it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from paralleljob.core.cluster import Allocation
from paralleljob.core.failure.repair import ReoptimizePolicy
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Event, Phase
from paralleljob.core.placing.eligibility import NodeFilter
from paralleljob.core.placing.placement import Placement
from paralleljob.core.reoptimize import (
    MigrationDecision,
    MoveBackAsk,
    decide_migration,
    move_back_candidate,
    placed_dear,
    reprice_now,
)
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.timing.ideal import IdealCosts
from paralleljob.k8s.edge.parse.queues import format_time, last_checkpoint, parse_time
from paralleljob.k8s.edge.parse.specs import JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord, cost_to_status
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.draining import drained_away
from paralleljob.k8s.plan.kinds.gangs import layout_of
from paralleljob.k8s.plan.moves.preempting import request_checkpoint


def reconsider(ctx: PassContext, held: HeldJob, node_filter: NodeFilter | None = None) -> PlacementRecord | None:
    """Re-price a running, repaired job; returns the new record when it migrates in this pass."""
    actions, job, request, record = held.actions, held.job, held.request, held.record
    view, now_s = ctx.view, ctx.now_s
    draft = actions.draft
    away = drained_away(draft.data)
    if record.cost is None or job.key not in view.state.allocations:
        return None
    previous: dict[str, Any] = dict(draft.data.get("reoptimization") or {})
    proposed_at = _seconds(previous.get("proposedAt"))
    running = draft.phase is Phase.RUNNING
    due = False
    if running and proposed_at is not None and request.failure.reoptimize is ReoptimizePolicy.MIGRATE_AT_CHECKPOINT:
        started = parse_time(job.status.start_time) or now_s
        boundary = last_checkpoint(job, request, started, now_s)
        due = boundary is not None and boundary > proposed_at
        if away and not due:
            due = not _ask_to_checkpoint(ctx, held, proposed_at)
    dear = placed_dear(record.cost.total_ms, _ideal_ms(ctx, request.spec, request.cost_model))
    since = _running_since(draft.data.get("startTime"), draft.data.get("lastMigration"))
    checked = _latest(_seconds(previous.get("checkedAt")), ctx.repriced_at.get((job.key, record.epoch)))
    ask = MoveBackAsk(running, job.restarts, away, dear, checked, due, since)
    actions.move_back_candidate = move_back_candidate(ask)
    if not reprice_now(ask, now_s).now:  # the core's rule, the simulator's too
        return None
    actions.repriced = record.epoch
    best = _best_now(ctx, held, node_filter)
    current_ms = record.cost.total_ms
    moves = _pods_to_move(ctx, held, best)
    interval = _checkpoint_interval(request, draft.data)
    best_ms = best.cost.total_ms if best else current_ms
    decision = decide_migration(current_ms, best_ms, moves, interval, drained_away=away)
    if due and decision.migrate and best is not None:
        return _migrate(ctx, held, best, decision)
    _report(ctx, actions, decision, _Repricing(current_ms, best, moves, proposed_at))
    migrating = request.failure.reoptimize is ReoptimizePolicy.MIGRATE_AT_CHECKPOINT
    if away and decision.migrate and proposed_at is None and migrating:
        _ask_to_checkpoint(ctx, held, now_s)
    return None


# One per topology (the view's topology is the same object while the nodes stand, clusterview._topology) and
# cost model; a handful at most, the oldest dropped first.
_IDEALS: dict[tuple[int, str], IdealCosts] = {}


def _ideal_ms(ctx: PassContext, spec: JobSpec, model_name: str) -> float:
    """The job's ideal cost on this cluster (core.timing.ideal), kept across passes per topology and shape."""
    topology = ctx.view.topology
    key = (id(topology), model_name)
    ideal = _IDEALS.get(key)
    if ideal is None or ideal.topology is not topology:
        while len(_IDEALS) >= 4:
            del _IDEALS[next(iter(_IDEALS))]
        ideal = _IDEALS[key] = IdealCosts(topology, cost_model(model_name))
    return ideal.total_ms(spec)


def _best_now(ctx: PassContext, held: HeldJob, node_filter: NodeFilter | None) -> Placement | None:
    """The placer's choice for the job now, its own GPUs counted free, as its layout places (plan/kinds)."""
    return layout_of(held.record).best_now(ctx, held, node_filter)


def _pods_to_move(ctx: PassContext, held: HeldJob, best: Placement | None) -> int:
    """Pods a move to ``best`` re-creates, as its layout counts them (TP groups, or tray pods)."""
    return 0 if best is None else layout_of(held.record).pods_to_move(ctx, held, best)


def _ask_to_checkpoint(ctx: PassContext, held: HeldJob, proposed_at: float) -> bool:
    """A drained-away job's safe point to move back at: the checkpoint-now signal until the grace period after
    the proposal ends. True while that is still to come (the pods are signalled, the loop wakes then)."""
    deadline = proposed_at + ctx.checkpoint_grace_s
    if ctx.now_s >= deadline:
        return False
    request_checkpoint(held.actions, held.pods, format_time(deadline))
    wake = held.actions.wake_at
    held.actions.wake_at = deadline if wake is None else min(wake, deadline)
    return True


def _latest(*stamps: float | None) -> float | None:
    known = [s for s in stamps if s is not None]
    return max(known) if known else None


def _running_since(start_time: object, last_migration: object) -> float | None:
    """When the job began running where it runs: its start, or its last move back if later."""
    started = parse_time(start_time)
    moved = parse_time(last_migration.get("time")) if isinstance(last_migration, dict) else None
    return moved if moved is not None and (started is None or moved > started) else started


def _seconds(value: object) -> float | None:
    """A stamp of ``status.reoptimization``: RFC 3339, as written now, or the Unix seconds (a float) an older
    operator wrote, still read so a job re-priced before the upgrade keeps its proposal and rate limit."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return parse_time(value)


def _checkpoint_interval(request: JobRequest, status: dict[str, Any]) -> float:
    """The job's own interval, else the Young/Daly one in its status; no checkpoints at all: never."""
    if request.checkpoint.interval_seconds:
        return float(request.checkpoint.interval_seconds)
    suggested = (status.get("checkpoint") or {}).get("suggestedIntervalSeconds")
    return float(suggested) if isinstance(suggested, int | float) and suggested > 0 else math.inf


@dataclass(frozen=True, slots=True)
class _Repricing:
    """A running job priced against the best placement now: its cost, the best (None: none exists), the
    pods a move would re-create, and when a move was first proposed (None: not yet)."""

    current_ms: float
    best: Placement | None
    moves: int
    proposed_at: float | None


def _report(ctx: PassContext, actions: JobActions, decision: MigrationDecision, priced: _Repricing) -> None:
    now = ctx.now
    best, moves, proposed_at = priced.best, priced.moves, priced.proposed_at
    draft = actions.draft
    data: dict[str, Any] = {
        "checkedAt": now,  # RFC 3339 like every time in the status (kubectl describe shows it as written)
        "currentCostMs": round(priced.current_ms, 6),
        "bestCostMs": round(best.cost.total_ms, 6) if best is not None else None,
        "podsToMove": moves,
        "worthMoving": decision.migrate,
    }
    if decision.migrate:
        data["proposedAt"] = format_time(proposed_at) if proposed_at is not None else now
        if proposed_at is None:
            actions.note("Normal", "Reoptimizable", "; ".join(decision.reasons))
    report = {k: v for k, v in data.items() if v is not None}
    previous = draft.data.get("reoptimization") or {}
    if {k: v for k, v in previous.items() if k != "checkedAt"} != {k: v for k, v in report.items() if k != "checkedAt"}:
        # only a new verdict is written (checkedAt: when it was reached); the same one again, a minute later, would
        # be a status write per candidate job a minute that says nothing new (the runtime keeps the re-price time)
        draft.set(reoptimization=report)
    status, reason = ("True", "CheaperPlacement") if decision.migrate else ("False", "NotWorthMoving")
    if best is None:
        reason = "NoAlternative"
    elif moves == 0 or decision.saving_ms <= 0:
        reason = "AtBestPlacement"
    draft.condition("Reoptimizable", status, reason, "; ".join(decision.reasons), now)


def _migrate(ctx: PassContext, held: HeldJob, best: Placement, decision: MigrationDecision) -> PlacementRecord:
    record = held.record
    assert record.cost is not None
    moved = _pods_to_move(ctx, held, best)
    message = (
        f"migrated at a checkpoint boundary: cost {record.cost.total_ms:.3f} -> {best.cost.total_ms:.3f} ms per"
        f" step, {moved} pod(s) moved, the whole gang restarts from its checkpoint"
    )
    new = relocate(ctx, held, best, message)
    draft = held.actions.draft
    draft.set(
        reoptimization=None,
        lastMigration={
            "time": ctx.now,
            "costBeforeMs": round(record.cost.total_ms, 6),
            "costAfterMs": round(best.cost.total_ms, 6),
            "podsMoved": moved,
            "overheadSecondsEstimate": round(decision.overhead_s, 1),
        },
    )
    draft.condition("Reoptimizable", "False", "Migrated", message, ctx.now)
    held.actions.note("Normal", "Migrated", message)
    return new


def relocate(ctx: PassContext, held: HeldJob, best: Placement, message: str) -> PlacementRecord:
    """Move a running job to ``best`` now: the view's state, the new record (epoch + 1) in its status, phase
    Recovering until every pod is bound again. Shared by the move back and the moves that free room
    (``roommaking``); the caller says why in its own fields and brings the pods in line with the record."""
    actions, job, request, record = held.actions, held.job, held.request, held.record
    view, now = ctx.view, ctx.now
    assert record.cost is not None
    draft = actions.draft
    view.state.release(job.key)
    view.state.allocate(Allocation(job.key, best.groups, request.spec.memory_per_gpu_gb))
    epoch = job.placement_epoch + 1
    # every pod restarts from the checkpoint, on the GPUs (or trays) of the new placement
    new = layout_of(record).moved(ctx, held, best, epoch, (message, *best.reasons))
    draft.apply(Event.MIGRATED, "Migrating", message, now)
    draft.set(
        placement=new.to_status(),
        placementEpoch=epoch,
        communicationCost=cost_to_status(best.cost, request.cost_model),
        nodes=",".join(new.nodes),
    )
    draft.condition("Bound", "False", "Migrating", message, now)
    actions.migrated = True
    return new

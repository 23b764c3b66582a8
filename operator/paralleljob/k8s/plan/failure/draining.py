"""Drain as maintenance: a job on GPUs an admin drained checkpoints first, then its groups there move.

``paralleljob drain`` marks GPUs ``paralleljob.dev/drained-gpus`` (the edge parses them into
``NodeInfo.drained_gpus``: not broken, no new work). A drain is not a failure, so it takes the preemption's
road, not the failure handler's alarm:

- Starting (the first pass that finds a Running job on drained GPUs): ``status.drain {deadline, requestedAt,
  nodes}`` with the operator's grace period (``--preemption-grace-seconds``, the preemption's), the condition
  ``DrainPending=True``, a Normal ``DrainPending`` Event, and the preemption's checkpoint-now signal
  (``paralleljob.dev/checkpoint-requested=<deadline>``, ``preempting.request_checkpoint``) on every pod of
  the job: the whole gang takes the checkpoint, as it does for a preemption.
- Moving: at the deadline, or earlier once the job reports a checkpoint after the request (its
  ``paralleljob.dev/last-checkpoint`` annotation or, failing that, a boundary of ``checkpoint.intervalSeconds``),
  the groups on drained GPUs move through the failure handler with ``FailureKind.DRAINED``: no restart
  counted, ``status.lastDrain`` instead of ``lastFailure``, Normal Events. ``drain --now``
  (``paralleljob.dev/drain-now-gpus``) and a job that is not Running (nothing to checkpoint) move at once.
- Cancelling: GPUs given back (``undrain``) before the move end the wait; the job stays where it is.

A job on whole trays of NVLink cliques (``layout: trays``) takes the same steps, tray by tray: its pods on
drained trays move through ``plan/trayrepair.py`` with the same ``FailureKind.DRAINED``.

Moving back after ``undrain`` is re-optimisation's (``reoptimizing.py``): a job whose last move was a drain's
is re-priced like a repaired one, and may move back even if it never checkpoints (tray records too: over whole
trays, ``reoptimizing._best_now``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from paralleljob.core.failure.repair import FailureKind
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.parse.queues import format_time, last_checkpoint, parse_time
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.edge.status.trayrecords import TraySlot
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.moves.preempting import request_checkpoint
from paralleljob.k8s.view.clusterview import ClusterView

DRAIN_CONDITION = "DrainPending"


def drained_groups(view: ClusterView, record: PlacementRecord) -> tuple[tuple[int, ...], tuple[str, ...], bool]:
    """The record's pods on drained GPUs (TP groups' slots, or a tray record's trays: indices in
    :func:`_pods`), their nodes, and whether any of them was drained ``--now``."""
    groups: list[int] = []
    nodes: dict[str, None] = {}
    at_once = False
    for g, slot in enumerate(_pods(record)):
        info = view.nodes.get(slot.node)
        hit = set(slot.gpu_indices) & info.drained_gpus if info is not None else set()
        if hit:
            groups.append(g)
            nodes[slot.node] = None
            at_once = at_once or bool(hit & info.drain_now_gpus)  # type: ignore[union-attr]
    return tuple(groups), tuple(nodes), at_once


def _pods(record: PlacementRecord) -> Sequence[PodSlot | TraySlot]:
    """A record's pods: one per TP group, or one per whole tray (``layout: trays``)."""
    return record.pod_slots


def drain_of(status: Mapping[str, Any]) -> tuple[float, float] | None:
    """A drain under way on a job's status: (deadline, when the checkpoint was requested)."""
    data = status.get("drain")
    if not isinstance(data, Mapping):
        return None
    deadline = parse_time(data.get("deadline"))
    if deadline is None:
        return None
    return deadline, parse_time(data.get("requestedAt")) or deadline


def drained_away(status: Mapping[str, Any]) -> bool:
    """Whether the job's last move was a drain's (not undone by a migration since): re-optimisation may
    move it back even if it was never restarted and never checkpoints."""
    drain = status.get("lastDrain")
    if not isinstance(drain, Mapping) or drain.get("action") != "rescheduled":
        return False
    moved = parse_time(drain.get("time"))
    back = parse_time((status.get("lastMigration") or {}).get("time"))
    return moved is not None and (back is None or back < moved)


def off_drained(ctx: PassContext, held: HeldJob, pod_names: Mapping[str, str] | None = None) -> Breakage | None:
    """The drain step for a job holding a placement: a Breakage of kind DRAINED when its groups on drained
    GPUs must move in this pass; None while it checkpoints (its pods are signalled) or when nothing of it
    is drained (a drain under way is then cancelled)."""
    actions, job, request, record = held.actions, held.job, held.request, held.record
    draft, now, now_s = actions.draft, ctx.now, ctx.now_s
    groups, nodes, at_once = drained_groups(ctx.view, record)
    pending = drain_of(draft.data)
    if not groups:
        if pending is not None:
            draft.set(drain=None)
            why = "the drained GPUs were given back before the job moved; it stays where it is"
            draft.condition(DRAIN_CONDITION, "False", "Cancelled", why, now)
        return None
    where = ", ".join(nodes)
    at_once = at_once or draft.phase is not Phase.RUNNING  # not running: no work to save, nothing to wait for
    if pending is None:
        deadline = now_s if at_once else now_s + ctx.checkpoint_grace_s
        stamp = format_time(deadline)
        draft.set(drain={"deadline": stamp, "requestedAt": now, "nodes": list(nodes)})
        if not at_once:
            message = (
                f"GPUs on {where} drained for maintenance: checkpoint now; the job's pods there move at the"
                f" next checkpoint or at {stamp}, whichever comes first; no restart is counted"
            )
            draft.condition(DRAIN_CONDITION, "True", "CheckpointRequested", message, now)
            actions.note("Normal", "DrainPending", message)
        pending = (deadline, now_s)
    deadline, requested = pending
    started = parse_time(job.status.start_time) or now_s
    checkpoint = last_checkpoint(job, request, started, now_s)
    checkpointed = checkpoint is not None and checkpoint > requested
    if not at_once and not checkpointed and now_s < deadline:
        request_checkpoint(actions, held.pods, format_time(deadline))
        actions.wake_at = deadline if actions.wake_at is None else min(actions.wake_at, deadline)
        return None
    if at_once:
        why = "at once (drain --now)" if draft.phase is Phase.RUNNING else f"at once (the job is {draft.phase.value})"
    else:
        why = "after its checkpoint" if checkpointed else f"when the grace period ended at {format_time(deadline)}"
    draft.set(drain=None)
    names, slots = pod_names or {}, _pods(record)
    pods = tuple(names.get(slots[g].name, slots[g].name) for g in groups)
    message = f"GPUs on {where} drained for maintenance (pods {', '.join(pods)}); moved {why}"
    draft.condition(DRAIN_CONDITION, "False", "Moved", message, now)
    return Breakage(FailureKind.DRAINED, groups, nodes, pods, message)

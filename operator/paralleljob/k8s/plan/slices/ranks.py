"""What a job of one rank per slice or share records when it is placed, whatever the slice: one pod per rank
(replica d, stage p: rank d·pp + p) named by the job, each slot made by the caller from its placement, and the
job's move from Queued to Placing with that record (the executor writes the status first) and its pods to make.

Used by the MIG slices on DRA nodes and on device-plugin nodes (``admission.py``) and the MPS shares
(``mpsadmission.py``): one home for the record's shape and the admission's writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from paralleljob.core.lifecycle import Event
from paralleljob.core.slices.pools import PoolPlacement
from paralleljob.core.slices.sharing import Placement
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, pod_name
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.moves.checkpointing import checkpoint_status
from paralleljob.k8s.plan.pods.podsync import sync_pods

P = TypeVar("P", Placement, PoolPlacement)


def rank_record(
    job: JobObject,
    request: JobRequest,
    placements: Sequence[P],
    epoch: int,
    slot: Callable[[str, int, int, P], PodSlot],
) -> PlacementRecord:
    """One pod per rank: ``slot(pod name, replica, stage, placement)`` makes its slot; the reasons are each
    placement's."""
    spec = request.spec
    slots = []
    for rank, placement in enumerate(placements):
        replica, stage = divmod(rank, spec.pp)
        slots.append(slot(pod_name(job.name, replica, stage), replica, stage, placement))
    reasons = tuple(f"rank {rank}: {p.why}" for rank, p in enumerate(placements))
    return PlacementRecord(
        epoch, request.cost_model, 1, spec.pp, spec.dp, tuple(slots), rank_order=request.rank_order, reasons=reasons
    )


def placed(ctx: PassContext, job: JobObject, request: JobRequest, record: PlacementRecord, message: str) -> None:
    """Queued -> Placing with ``record`` (the executor writes the status first) and its pods to create."""
    actions, view, now = ctx.actions_for(job), ctx.view, ctx.now
    epoch = record.epoch
    actions.draft.apply(Event.ADMITTED, "Placed", message, now)
    actions.draft.set(
        placement=record.to_status(),
        placementEpoch=epoch,
        communicationCost=None,
        nodes=",".join(record.nodes),
        checkpoint=checkpoint_status(request, len(record.nodes)),
    )
    actions.events = [e for e in actions.events if e.reason != "Accepted"]
    actions.note("Normal", "Placed", message)
    sync_pods(actions, job, request, record, ctx.pods_of(job), view.nodes, ctx.gpu_holders)

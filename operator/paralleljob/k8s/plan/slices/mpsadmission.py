"""Admission of a queued job that asks for MPS shares (``spec.gpuSharing.mps``): each rank one client of one
GPU's MPS server, packed by the core's rule (``core.slices.sharing.pack``) over the DRA nodes' GPUs
(``mpsbook.py``), or told why it waits.

The queue discipline is the slice jobs' (``admission.admit_slices`` calls :func:`admit_shares` in line order,
after the gates and the queue's cap). A rank's share is ``percent`` of a GPU's compute and as much of its
memory; shares of one GPU are all of one namespace and one percent, so at most ``floor(100 / percent)``
(and the model's ``MPS_MAX_CLIENTS``) are on a GPU. The record names, per rank, node, GPU index and share;
the GPU is held by its ``mps:`` holder in the view's state from then on, so no whole-GPU job and no MIG slice
goes there, and each pod's claim is the GPU's shared one (``edge/render/mpsclaims.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.slices.sharerepair import pack_share
from paralleljob.core.slices.sharing import MpsShare, NodeGpus, Placement, pack_each
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import MpsGrant, PlacementRecord, PodSlot
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.slices.mpsbook import mps_nodes, share_of
from paralleljob.k8s.plan.slices.ranks import placed, rank_record
from paralleljob.k8s.view.clusterview import hold_share


def place_shares(nodes: Sequence[NodeGpus], namespace: str, percent: int, ranks: int, label: str) -> list[Placement]:
    """One share per rank, packed one after the other (each rank sees the shares before it taken), each sized
    on its GPU's memory; :class:`PlacementInfeasible` with the reasons of the first rank that does not fit."""
    if not nodes:
        raise PlacementInfeasible(label, ["no DRA node: MPS shares are placed only on DRA nodes"])
    share_for = shares_for(nodes, namespace, percent)
    return pack_each(nodes, [label] * ranks, lambda free, at: pack_share(free, share_for, at))


def shares_for(nodes: Sequence[NodeGpus], namespace: str, percent: int) -> dict[float, MpsShare]:
    """The job's share on a GPU of each memory size the nodes have."""
    return {g.memory_gb: share_of(namespace, percent, g.memory_gb) for n in nodes for g in n.gpus[:1]}


def admit_shares(ctx: PassContext, job: JobObject, request: JobRequest, ranks: int) -> str:
    """Place and record the job's shares; "" when placed, else why it waits."""
    node_filter = ctx.eligibility.filter_for(job.key, request.spec, with_usage=False)
    nodes = mps_nodes(ctx.view, lambda n: node_filter is None or node_filter.admits(n), ctx.shares_placed)
    try:
        placements = place_shares(nodes, job.namespace, request.mps_percent, ranks, job.key)
    except PlacementInfeasible as exc:
        return "; ".join((*exc.reasons, *(node_filter.why if node_filter is not None else ())))
    record_shares(ctx, job, request, placements)
    return ""


def share_record(job: JobObject, request: JobRequest, placements: Sequence[Placement], epoch: int) -> PlacementRecord:
    """One pod per rank, each an MPS client of its placement's GPU."""

    def slot(name: str, replica: int, stage: int, placement: Placement) -> PodSlot:
        assert isinstance(placement.grant, MpsShare), "a share placement grants an MPS share"
        mps = MpsGrant(placement.grant.compute_pct)
        return PodSlot(name, replica, stage, placement.node, placement.gpus, epoch, mps=mps)

    return rank_record(job, request, placements, epoch, slot)


def hold_shares(ctx: PassContext, namespace: str, slots: Sequence[PodSlot]) -> None:
    """The slots' GPUs held by their ``mps:`` holders, and their shares counted for the rest of the pass."""
    for slot in slots:
        if slot.mps is not None:
            hold_share(ctx.view, slot.node, slot.gpu_indices[0])
            ctx.shares_placed.setdefault((slot.node, slot.gpu_indices[0]), []).append((namespace, slot.mps.percent))


def record_shares(ctx: PassContext, job: JobObject, request: JobRequest, placements: Sequence[Placement]) -> None:
    """Queued -> Placing with the shares recorded (the executor writes the status first), their GPUs held in
    the view's state, and the pods to create and bind."""
    epoch = job.placement_epoch + 1
    record = share_record(job, request, placements, epoch)
    hold_shares(ctx, job.namespace, record.slots)
    where = ", ".join(f"{s.node} GPU {s.gpu_indices[0]}" for s in record.slots)
    message = f"{len(record.slots)} x MPS {request.mps_percent}% on {where}: {placements[0].why.partition(': ')[2]}"
    placed(ctx, job, request, record, message)

"""Admission of queued jobs that ask for MIG slices (``spec.gpuSharing.migProfile``): each rank placed on one
slice by the core's packing rule (``core.slices.sharing.pack``), or told why it waits.

Slice jobs are admitted after the whole-GPU jobs of the same call, in line order. A whole-GPU head that does
not fit blocks the slice jobs behind it in its queue as it blocks any job (strict FIFO: small jobs must not
starve a big one by taking the GPUs it waits for); a slice job that does not fit blocks only the slice jobs
behind it, never a whole-GPU job, which waits for something else. Each rank counts as one GPU against its
queue's cap (``maxGPUs``), whatever its slice's size: a cap never lets a queue hold more than it says.

A slice job is placed on DRA nodes whose driver publishes MIG devices (``book.py``) when they have room: its
record names, per rank, the node, the GPU index and the slice (profile and placement start), and its pod's
claim names that exact MIG device (``pods/podsync.mig_claim``). Else on the device plugin's MIG nodes
(``poolbook.py``, mixed strategy): its record names, per rank, the node and the profile only, its pod asks
for ``nvidia.com/mig-<profile>: 1``, and the device plugin picks the GPU and the MIG device. Once placed on a
DRA node, the GPU is held by its ``sliced:`` holder in the view's state, so no whole-GPU job is placed on it
while any slice is there (a device-plugin node offers no MIG GPU as ``nvidia.com/gpu``). A slice job's waits
are never
remembered by the waiting memo (``admission/waiting_remember``): a slice freed on a GPU that stays sliced
changes no GPU's owner, which is all the memo watches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from paralleljob.core.admit.admission import Admit, Wait
from paralleljob.core.admit.fifo import LineKey, behind_blocked_head
from paralleljob.core.admit.gates import WaitReason, entry_gate, quota_refusal
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.slices.mig import MigSlice
from paralleljob.core.slices.pools import PoolPlacement
from paralleljob.core.slices.pools import place_ranks as pool_ranks
from paralleljob.core.slices.sharing import NodeGpus, Placement, apply, pack, pack_each
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import MigGrant, PlacementRecord, PodSlot
from paralleljob.k8s.plan.admission.fifo_admission import admit_all, entry_of, line_position, unknown_queue
from paralleljob.k8s.plan.admission.waiting import blocks
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.slices.book import named_profile, shared_nodes
from paralleljob.k8s.plan.slices.mpsadmission import admit_shares
from paralleljob.k8s.plan.slices.poolbook import placed_use, pool_nodes
from paralleljob.k8s.plan.slices.ranks import placed, rank_record
from paralleljob.k8s.view.clusterview import hold_slice

Entry = tuple[JobObject, JobRequest]


def asks_for_slices(request: JobRequest) -> bool:
    return bool(request.mig_profile or request.mps_percent)


def split(entries: Sequence[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(whole-GPU entries, slice entries)."""
    whole = [e for e in entries if not asks_for_slices(e[1])]
    return whole, [e for e in entries if asks_for_slices(e[1])]


def admit_with_slices(
    ctx: PassContext, entries: Sequence[Entry], in_use: dict[str, int], strict_fifo: bool, blocked: Mapping[str, str]
) -> tuple[list[float], Sequence[Admit | Wait]]:
    """``fifo_admission.admit_all`` for the whole-GPU entries, then :func:`admit_slices` for the others
    behind the heads that block; the core FIFO pass's decisions only (the waiting memo reads those)."""
    whole, sliced = split(entries)
    durations, decisions = admit_all(ctx, whole, in_use, strict_fifo, blocked) if whole else ([], ())
    if sliced:
        heads: dict[str, LineKey | None] = dict.fromkeys(blocked) if strict_fifo else {}
        if strict_fifo:
            heads.update(blocked_heads(decisions, {r.spec.job_id: line_position(j, r) for j, r in whole}))
        admit_slices(ctx, sliced, in_use, heads, strict_fifo)
    return durations, decisions


def blocked_heads(decisions: Sequence[Admit | Wait], positions: Mapping[str, LineKey]) -> dict[str, LineKey | None]:
    """queue -> the line position of the first whole-GPU job of the call that blocks it."""
    out: dict[str, LineKey | None] = {}
    for decision in decisions:
        if isinstance(decision, Wait) and blocks(decision) and decision.queue not in out:
            out[decision.queue] = positions.get(decision.job_id)
    return out


def place_ranks(nodes: Sequence[NodeGpus], profile_name: str, ranks: int, label: str) -> list[Placement]:
    """One slice per rank, packed one after the other (each rank sees the slices before it taken);
    :class:`PlacementInfeasible` with the reasons of the first rank that does not fit."""
    shapes = (g.shape for n in nodes for g in n.gpus if g.shape is not None)
    profile = next((p for shape in shapes if (p := named_profile(shape, profile_name)) is not None), None)
    if profile is None:
        raise PlacementInfeasible(label, [f"no node offers MIG {profile_name}: no DRA node publishes such a device"])
    return pack_each(nodes, [label] * ranks, lambda free, at: pack(profile, free, at))


def admit_slices(
    ctx: PassContext,
    queued: Sequence[Entry],
    in_use: dict[str, int],
    blocked: Mapping[str, LineKey | None],
    strict: bool = True,
) -> None:
    """Place what fits, in line order; ``blocked``: queue -> the line position of a whole-GPU head that does
    not fit (None: a head decided before, which every job given here stands behind). ``strict``: a slice job
    that does not fit holds the slice jobs behind it in its queue."""
    heads = dict(blocked)
    nodes: list[NodeGpus] | None = None
    for job, request in sorted(queued, key=lambda entry: line_position(*entry)):
        actions = ctx.actions_for(job)
        queue, at = request.queue, line_position(job, request)
        entry = entry_of(ctx, job, request)
        gate = entry_gate(replace(entry, has_gpu_nodes=entry.has_gpu_nodes or bool(ctx.view.pools)))
        if missing := unknown_queue(request, ctx.queues):
            ctx.wait(actions, WaitReason.QUEUE_NOT_FOUND, missing)
            continue
        if gate is not None:
            ctx.wait(actions, gate.reason, gate.message)
            continue
        head = heads.get(queue, at)
        if queue in heads and (head is None or head < at):
            ctx.wait(actions, WaitReason.WAITING, behind_blocked_head(queue)[0])
            continue
        ranks = request.spec.pp * request.spec.dp
        info = ctx.queues.get(queue)
        refusal = quota_refusal(queue, in_use.get(queue, 0), ranks, info.max_gpus if info is not None else None)
        if refusal is not None:
            ctx.wait(actions, WaitReason.QUEUE_FULL, refusal)
            if strict:
                heads.setdefault(queue, at)
            continue
        if request.mps_percent:  # MPS shares: their own book and record (mpsadmission.py)
            refused = admit_shares(ctx, job, request, ranks)
            if refused:
                ctx.wait(actions, WaitReason.UNSCHEDULABLE, refused)
                if strict:
                    heads.setdefault(queue, at)
                continue
            in_use[queue] = in_use.get(queue, 0) + ranks
            nodes = None  # built again: the shared GPU is held now, no slice goes there
            continue
        nodes = shared_nodes(ctx.view, placed=ctx.slices_placed) if nodes is None else nodes
        node_filter = ctx.eligibility.filter_for(job.key, request.spec, with_usage=False)
        eligible = [n for n in nodes if node_filter is None or node_filter.admits(ctx.view.node_index[n.name])]
        try:
            placements = place_ranks(eligible, request.mig_profile, ranks, job.key)
        except PlacementInfeasible as exc:
            why = (*exc.reasons, *(node_filter.why if node_filter is not None else ()))
            pooled = place_pooled(ctx, request, ranks, job.key) if ctx.view.pools else None
            if isinstance(pooled, list):
                in_use[queue] = in_use.get(queue, 0) + ranks
                record_pooled(ctx, job, request, pooled)
                continue
            if pooled is not None:  # the DRA nodes' reasons only where there are some
                why = (pooled, *why) if nodes else (pooled,)
            ctx.wait(actions, WaitReason.UNSCHEDULABLE, "; ".join(why))
            if strict:
                heads.setdefault(queue, at)
            continue
        for placement in placements:
            nodes = list(apply(nodes, placement))
        in_use[queue] = in_use.get(queue, 0) + ranks
        record_slices(ctx, job, request, placements)


def place_pooled(ctx: PassContext, request: JobRequest, ranks: int, label: str) -> list[PoolPlacement] | str:
    """The ranks' slices on the device plugin's MIG nodes (``core.slices.pools``), or why they do not fit."""
    used = (ctx.pool_held, placed_use(ctx.pool_slices_placed))
    try:
        return pool_ranks(request.mig_profile, ranks, pool_nodes(ctx.view, used, request), label)
    except PlacementInfeasible as exc:
        return f"device-plugin MIG nodes: {'; '.join(exc.reasons)}"


def slice_record(job: JobObject, request: JobRequest, placements: Sequence[Placement], epoch: int) -> PlacementRecord:
    """One pod per rank, each on its placement's MIG slice."""

    def slot(name: str, replica: int, stage: int, placement: Placement) -> PodSlot:
        grant = placement.grant
        assert isinstance(grant, MigSlice), "a slice placement grants a MIG slice"
        mig = MigGrant(grant.profile.name, grant.start)
        return PodSlot(name, replica, stage, placement.node, placement.gpus, epoch, mig)

    return rank_record(job, request, placements, epoch, slot)


def record_slices(ctx: PassContext, job: JobObject, request: JobRequest, placements: Sequence[Placement]) -> None:
    """Queued -> Placing with the slices recorded (the executor writes the status first), their GPUs held
    sliced in the view's state, and the pods to create and bind."""
    view = ctx.view
    epoch = job.placement_epoch + 1
    record = slice_record(job, request, placements, epoch)
    for slot in record.slots:
        hold_slice(view, slot.node, slot.gpu_indices[0])
        if slot.mig is not None:
            ctx.slices_placed.setdefault((slot.node, slot.gpu_indices[0]), []).append(slot.mig)
    where = ", ".join(f"{s.node} GPU {s.gpu_indices[0]} ({s.mig})" for s in record.slots)
    message = f"{len(record.slots)} x MIG {request.mig_profile} on {where}: {placements[0].why.partition(': ')[2]}"
    placed(ctx, job, request, record, message)


def pooled_record(
    job: JobObject, request: JobRequest, placements: Sequence[PoolPlacement], epoch: int
) -> PlacementRecord:
    """One pod per rank, each naming its node and profile and no GPU: the device plugin picks it."""

    def slot(name: str, replica: int, stage: int, placement: PoolPlacement) -> PodSlot:
        return PodSlot(name, replica, stage, placement.node, (), epoch, MigGrant(placement.profile, None))

    return rank_record(job, request, placements, epoch, slot)


def record_pooled(ctx: PassContext, job: JobObject, request: JobRequest, placements: Sequence[PoolPlacement]) -> None:
    """As :func:`record_slices`, for slices the device plugin hands out: counted in the pass's placements so
    later placements of the pass see them; the pods ask for ``nvidia.com/mig-<profile>``."""
    epoch = job.placement_epoch + 1
    record = pooled_record(job, request, placements, epoch)
    for slot in record.slots:
        ctx.pool_slices_placed.setdefault(slot.node, []).append(request.mig_profile)
    per_node = Counter(slot.node for slot in record.slots)
    where = ", ".join(f"{n} on {node}" for node, n in per_node.items())
    message = (
        f"{len(record.slots)} x MIG {request.mig_profile} ({where}; the device plugin picks each GPU):"
        f" {placements[0].why.partition(': ')[2]}"
    )
    placed(ctx, job, request, record, message)

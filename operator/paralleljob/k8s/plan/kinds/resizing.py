"""The elastic sizing's side of the pass (``kinds/elasticity``): the core's resize decisions (``core/elastic.py``,
the same functions the simulator calls) turned into records, statuses and Events.

- :func:`resize_running`: a Running, fully bound elastic job grows toward its desired size (never while a
  rigid job at equal or higher priority waits) or, after ``kubectl scale`` down, drops its highest replicas.
- :func:`drop_on_failure`: a replica on broken hardware with no room to repair it is dropped, the others keep
  their pods.
- :func:`commit_resize`: any of these, or a higher-priority job taking growth replicas (the cheapest
  preemption, ``kinds/elastic_admission``), written into the view, the record and the status.
- :func:`note_membership`: the replicas ConfigMap and rendezvous Service of a job whose placement changed.

The kept replicas keep their pod names (``<job>-d<D>-p<P>``, D the replica's stable id, published as
``REPLICA_GROUP_ID``) and their GPUs, so their pods match their slots and are not re-created; only the
replica numbers in the record follow the live membership. A new replica takes the lowest free id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from paralleljob.core.cluster import Allocation
from paralleljob.core.elastic import (
    ElasticRange,
    Resize,
    growth_blocker,
    plan_growth,
    resized,
    rigid_line,
    trim_to_desired,
)
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.eligibility import restricted
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.timing.evaluate import node_level_cost
from paralleljob.core.timing.steptime import StepTimeModel
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.render.elasticenv import replica_group_id
from paralleljob.k8s.edge.render.manifests import membership, rendezvous
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, cost_to_status, pod_name, record_from_status
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.status import StatusDraft

STEP_TIME = StepTimeModel()  # prices a replica that would widen the DP ring (core.elastic.worth_adding)
WAITING = frozenset({Phase.PENDING, Phase.QUEUED, Phase.PREEMPTED})


def rigid_waiting(jobs: Sequence[JobObject]) -> tuple[tuple[int, str], ...]:
    """The core's line of rigid jobs waiting for GPUs (``core.elastic.rigid_line``): every ParallelJob not
    elastic, waiting to be placed and not being deleted, as (priority, key)."""
    return rigid_line(
        (j.request.priority, j.key) for j in jobs
        if j.request is not None and j.request.elastic is None and j.phase in WAITING and not j.deleting
    )


def write_status(draft: StatusDraft, rng: ElasticRange, current: int, held_back: str | None) -> None:
    """The replica counts (``status.replicas`` is the scale subresource's), and why the job is not at max."""
    draft.set(
        replicas=current,
        desiredReplicas=rng.desired,
        minReplicas=rng.min,
        maxReplicas=rng.max,
        replicaRange=f"{current}/{rng.desired} ({rng.min}..{rng.max})",
    )
    if held_back is not None:
        elastic = dict(draft.data.get("elastic") or {})
        elastic["notAtMax"] = held_back if current < rng.max else ""
        draft.set(elastic=elastic)


def _record_after(
    ctx: PassContext, job: JobObject, record: PlacementRecord, spec: JobSpec, resize: Resize, model: str
) -> PlacementRecord:
    """The record after ``resize``: kept slots unchanged (names, GPUs, incarnations), new slots for new replicas."""
    view = ctx.view
    assert view.state is not None and view.topology is not None
    epoch = job.placement_epoch + 1
    old_by_gpus = {(s.node, s.gpu_indices): s for s in record.slots}
    used_ids = set()
    for s in record.slots:
        used_ids.add(replica_group_id(s, job.name))
    slots: list[PodSlot] = []
    new_ids: dict[int, int] = {}
    for g, gpus in enumerate(resize.groups):
        node, indices = view.locate(gpus)
        replica, stage = divmod(g, spec.pp)
        old = old_by_gpus.get((node, indices))
        if old is not None and old.stage == stage:
            slots.append(PodSlot(old.name, replica, stage, node, indices, old.incarnation))
            continue
        if replica not in new_ids:
            free = next(i for i in range(len(used_ids) + len(resize.groups) + 1) if i not in used_ids)
            used_ids.add(free)
            new_ids[replica] = free
        slots.append(PodSlot(pod_name(job.name, new_ids[replica], stage), replica, stage, node, indices, epoch))
    grown = resized(spec, resize.after)
    nodes = [view.topology.gpu_node[g[0]] for g in resize.groups]
    cost = node_level_cost(view.topology, grown, nodes, cost_model(model))
    return dataclasses.replace(
        record, epoch=epoch, dp=resize.after, slots=tuple(slots), cost=cost, reasons=resize.reasons
    )


def commit_resize(
    ctx: PassContext, held: HeldJob, resize: Resize, kind: str, extra: str = ""
) -> PlacementRecord:
    """Write ``resize`` into the view's state and the job's status, with an Event; returns the new record."""
    actions, job, request, record = held.actions, held.job, held.request, held.record
    view, now = ctx.view, ctx.now
    assert view.state is not None and request.elastic is not None
    new = _record_after(ctx, job, record, request.spec, resize, request.cost_model)
    view.state.release(job.key)
    view.state.allocate(Allocation(job.key, resize.groups, request.spec.memory_per_gpu_gb))
    message = "; ".join((*resize.reasons, *((extra,) if extra else ())))
    added = sorted({s.name for s in new.slots} - {s.name for s in record.slots})
    if added:  # a new replica's pods are named by the lowest free id (-d3- for the 5th after one left, say)
        message += f"; new pods {', '.join(added)}"
    draft = actions.draft
    draft.set(
        placement=new.to_status(),
        placementEpoch=new.epoch,
        communicationCost=cost_to_status(new.cost, request.cost_model) if new.cost else None,
        nodes=",".join(new.nodes),
        shape=f"{request.spec.tp}x{request.spec.pp}x{resize.after}",
        gpus=new.num_gpus,
    )
    elastic = dict(draft.data.get("elastic") or {})
    elastic["lastResize"] = {"time": now, "kind": kind, "from": resize.before, "to": resize.after, "reason": message}
    draft.set(elastic=elastic)
    write_status(draft, request.elastic, resize.after, None)
    actions.note("Normal", kind, f"{resize.before} -> {resize.after} replicas: {message}")
    return new


def resize_running(ctx: PassContext, held: HeldJob, waiting: Sequence[tuple[int, str]]) -> PlacementRecord | None:
    """Grow or scale down a Running, fully bound elastic job; the new record, or None when it stays."""
    request, job = held.request, held.job
    rng = request.elastic
    view, placer = ctx.view, ctx.placer
    if rng is None or view.state is None or placer is None or job.key not in view.state.allocations:
        return None
    groups = view.state.allocations[job.key].groups
    spec = request.spec  # at its current size (at_current_size)
    trim = trim_to_desired(spec, groups, rng)
    if trim is not None:
        return commit_resize(ctx, held, trim, "ScaledDown")
    blocker = growth_blocker(waiting, spec.priority)
    node_filter = ctx.eligibility.filter_for(job.key, spec)
    with restricted(view.state, spec, node_filter):
        growth = plan_growth(
            view.state, placer, spec, groups, rng, cost_model(request.cost_model), STEP_TIME,
            rigid_waiting=blocker,
        )
    write_status(held.actions.draft, rng, spec.dp, growth.held_back)
    if growth.resize is None:
        return None
    return commit_resize(ctx, held, growth.resize, "Grew")


def drop_on_failure(ctx: PassContext, held: HeldJob, drop: Resize, message: str) -> PlacementRecord:
    """Carry out the core's drop (``core/failure/elastic_failure.drop_instead``: the policy would take the job off its
    GPUs and it stays at or above min): the kept replicas keep their pods and GPUs. Counted in
    ``status.elastic.drops``, not in ``status.restarts`` (``counts_as_restart``)."""
    new = commit_resize(ctx, held, drop, "DroppedReplica", message)
    draft = held.actions.draft
    draft.set(elastic={**(draft.data.get("elastic") or {}), "drops": held.job.status.drops + 1})
    return new


def note_membership(actions: JobActions) -> None:
    """An elastic job whose placement changed this pass gets its replicas ConfigMap and its rendezvous Service
    rewritten."""
    job, data = actions.job, actions.draft.data
    if job.request is None or job.request.elastic is None or job.request.pod_group:
        return
    if not data.get("placement") or data.get("placement") == job.status.raw.get("placement"):
        return
    record = record_from_status(data)
    if record is not None:
        actions.membership = membership(job, record)
        actions.rendezvous = rendezvous(job, record)  # re-pointed when the host's replica went

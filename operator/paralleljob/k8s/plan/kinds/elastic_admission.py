"""The elastic sizing's admission: admitting elastic jobs, and taking growth replicas for a waiting
higher-priority job, in the operator's FIFO admission: thin shells over ``core/elastic.py`` (``place_largest``,
``shrink_for``); the queue policies' pass decides the same in the core (``core/admit/admission.py``) and carries its
shrinks out with :func:`commit_shrinks`."""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.cluster import ClusterState
from paralleljob.core.elastic import ElasticHolding, Resize, place_largest, shrink_for
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import cost_model
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.kinds.resizing import commit_resize
from paralleljob.k8s.plan.pods.podsync import sync_pods


def place_elastic(
    state: ClusterState, placer: PlacerLike, request: JobRequest, gpu_room: int | None
) -> tuple[Placement, tuple[str, ...]]:
    """The placement at the largest size that fits now; :class:`PlacementInfeasible` when min does not."""
    assert request.elastic is not None
    return place_largest(state, placer, request.spec, request.elastic, cost_model(request.cost_model), gpu_room)


def shrink_growth_replicas(
    ctx: PassContext, job: JobObject, request: JobRequest
) -> tuple[Placement, tuple[str, ...]] | None:
    """Shrink lower-priority elastic jobs by their growth replicas (highest first) when that lets ``job``
    place now: their records, statuses and Events are written here; the caller admits ``job`` on the
    returned placement. None when growth replicas would not do (the job waits, as before). The core FIFO pass
    asks this for a rigid job only; the jobs offered are the pass's ``shrinkable`` ones
    (``core.elastic.offers_growth_replicas``, in ``decide``)."""
    view, placer = ctx.view, ctx.placer
    if view.state is None or placer is None or not ctx.shrinkable:
        return None
    holdings = []
    for held in ctx.shrinkable.values():
        allocation = view.state.allocations.get(held.job.key)
        if allocation is not None and held.request.elastic is not None:
            holdings.append(ElasticHolding(held.request.spec, allocation.groups, held.request.elastic))
    shrink = shrink_for(view.state, placer, cost_model(request.cost_model), request.spec, holdings)
    if shrink is None:
        return None
    commit_shrinks(ctx, job, shrink.resizes)
    return shrink.placement, shrink.reasons


def commit_shrinks(ctx: PassContext, job: JobObject, resizes: Sequence[Resize]) -> None:
    """Carry out the core's growth-replica preemptions for ``job`` (either admission path): records,
    statuses, Events, and the dropped pods deleted now."""
    for resize in resizes:
        held = ctx.shrinkable.pop(resize.job_id)
        new = commit_resize(ctx, held, resize, "Shrank", f"preempted growth replicas for {job.key}")
        # its dropped pods go now; the new job's pods wait for their GPUs (podsync._waits_for_gpus)
        sync_pods(held.actions, held.job, held.request, new, held.pods, ctx.view.nodes, ctx.gpu_holders)

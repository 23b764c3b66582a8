"""Whether a pass asks the move planner for a refused job (``moves/roommaking``): enough GPUs free in all, or
soon free once the running jobs a plan may wait for end (``core.moveplan``'s rule), and the job's last "no"
old enough. Counted once a pass where many lines ask (:class:`Counted`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paralleljob.core.moveplan import MoveBounds, ends_in_time
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_time
from paralleljob.k8s.edge.parse.specs import JobRequest
from paralleljob.k8s.plan.context import PassContext

ASK_EVERY_S = 300.0  # a "no" is asked again this much later at the soonest (as the simulator's)


def bounds_of(ctx: PassContext, request: JobRequest) -> QueueInfo:
    return ctx.queues.get(request.queue) or QueueInfo(request.queue)


def worth_asking(
    ctx: PassContext, request: JobRequest, data: Mapping[str, Any], counted: Counted | None = None
) -> bool:
    """Enough GPUs are free in all, or will be once the jobs a plan may wait for end (``core.moveplan``'s
    rule; else moving frees nothing and the job waits as before, nothing written), and the last "no" is older
    than ``ASK_EVERY_S`` (each ask tries placements). ``counted``: those counts, kept over many asks."""
    check = data.get("moveCheck")
    checked = parse_time(check.get("checkedAt")) if isinstance(check, dict) else None
    if checked is not None and ctx.now_s - checked < ASK_EVERY_S:
        return False
    counted = Counted(ctx) if counted is None else counted
    need = request.spec.num_gpus
    return counted.free >= need or counted.free + counted.ending_soon(request) >= need


class Counted:
    """The free GPUs and the GPUs ending soon (per queue bounds), counted once: :meth:`roommaking.RoomMaking.would_ask`
    asks for each line left out, on the state before the admission took GPUs, so the counts never say "no"
    where the admission's end would say "yes"."""

    def __init__(self, ctx: PassContext) -> None:
        state = ctx.view.state
        self.ctx = ctx
        self.free = sum(state.usable_free(n) for n in range(state.topology.num_nodes))
        self.ending: dict[MoveBounds, int] = {}

    def ending_soon(self, request: JobRequest) -> int:
        bounds = bounds_of(self.ctx, request).moves
        if bounds not in self.ending:
            self.ending[bounds] = ending_soon_gpus(self.ctx, request)
        return self.ending[bounds]


def ending_soon_gpus(ctx: PassContext, request: JobRequest) -> int:
    """GPUs of the running jobs with an ``expectedRuntime`` that a plan for ``request`` may wait for."""
    bounds, total = bounds_of(ctx, request).moves, 0
    for key, allocation in ctx.view.state.allocations.items():  # the running jobs, not every job of the pass
        other = ctx.jobs.get(key)
        runtime = other.request.expected_runtime_s if other is not None and other.request is not None else None
        if other is None or runtime is None:
            continue
        started = parse_time(other.status.start_time)
        if started is not None and ends_in_time(started + runtime, ctx.now_s, bounds):
            total += len(allocation.gpus)
    return total

"""Moving running jobs at their checkpoints to free a whole domain for a waiting job: the operator's half of
:func:`paralleljob.core.moves.plan_moves` (the simulator's is ``sim/run/roommoves``). On NVL72 the domain is
an NVLink clique for a tray job; on HGX (a cluster without NVLink cliques) a node or a leaf for a ParallelJob
whose TP groups find no whole node free although enough GPUs are free in all.

After the FIFO admission, the first such job that was refused (``Unschedulable``), whose queue allows moves
(``spec.moves.perHour`` > 0), is handed to the planner with every running job, over the topology and placer
it is admitted with (the NVLink topology and placer for trays, the core placer on HGX). A plan is recorded
in its ``status.movePlan`` (``edge/status/moveplans``) and from then on every pass, this operator or one restarted,
carries it out from there:

- the plan's nodes are *held*: closed to every other placement of the pass (``holding``), backfill included;
- a job of the plan moves at once (``when: now``: its lost work is under the bound) or once it checkpointed
  after the plan was made (the re-optimisation machinery's boundary: its ``last-checkpoint`` annotation, else
  the multiples of its interval), to where ``core.moves.place_elsewhere`` puts it with the held nodes closed
  (the rule the plan priced, asked again since the cluster changed), through the migrate path
  (``reoptimizing.relocate``); ``at-end`` jobs are waited for;
- once nothing of the plan is left on the held nodes the waiting job is admitted (any job that ended
  counts as out of the way, as in the simulator);
- a plan that no longer holds is dropped with a reason (``MovePlanDropped`` Event, ``status.moveCheck``): a
  held node failed, another job holds GPUs there, a move found no placement, the moves overran their time.
  A plan whose waiting job was deleted goes with its status.

One plan at a time; the FIFO path only (``--queue-policy strict-fifo``, the default): the core's queueing
pass has its own reservations and preemption. Jobs with a node filter, pod groups and elastic jobs are never
moved (their filter or owner decides where they may go) and never planned for. A job that takes no trays on
a cluster with NVLink cliques (an HGX job beside NVL72 racks) is not planned for either: its
``status.moveCheck`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth, closed_nodes
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.lifecycle import Phase
from paralleljob.core.moves import MovableJob, MovePlan, MoveRequest, MoveWhen, place_elsewhere, plan_moves
from paralleljob.core.nvl72.cliques import clique_index
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.placing.placer import OPERATOR_PLACER, Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.timing.evaluate import placement_cost
from paralleljob.k8s.edge.parse.queues import format_time, last_checkpoint, parse_time, preemption_of
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.moveplans import (
    MovePlanRecord,
    PlannedMove,
    last_moved,
    last_room_move,
    plan_from_status,
    plan_to_status,
)
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.admission.fifo_admission import record_admission
from paralleljob.k8s.plan.admission.trayadmission import (
    TRAY_PLACER,
    nvlink_topology,
    place_on_trays,
    seen_as,
    spans_trays,
    spares_for,
    wants_trays,
)
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.kinds.gangs import layout_of
from paralleljob.k8s.plan.kinds.hgx import HGX
from paralleljob.k8s.plan.kinds.nvl72 import TRAYS
from paralleljob.k8s.plan.kinds.picker import kind_of, sizing_of
from paralleljob.k8s.plan.moves.reoptimizing import relocate
from paralleljob.k8s.plan.moves.roomasking import ASK_EVERY_S, Counted, bounds_of, worth_asking
from paralleljob.k8s.plan.moves.roomsaying import dropped, moved_note, planned_message
from paralleljob.k8s.plan.pods.podsync import is_ending, sync_pods
from paralleljob.k8s.view.clusterview import ClusterView

HOUR_S = 3600.0
MOVING = "MovingJobs"  # the waiting job's reason while a plan is carried out
UNSCHEDULABLE = "Unschedulable"


@dataclass
class RoomMaking:
    """One pass's part: the plan in flight (its waiting job and the node indices it holds), found before the
    admission and said after it; ``skip``: jobs whose fate something else decides this pass (busy, held)."""

    ctx: PassContext
    skip: Collection[str]
    head: JobObject | None = None
    plan: MovePlanRecord | None = None
    held: tuple[int, ...] = ()
    in_flight: bool = False
    counted: Counted | None = None  # GPUs free and ending soon as the admission found them (:meth:`would_ask`)

    def before(self, queued: Sequence[tuple[JobObject, JobRequest]]) -> list[tuple[JobObject, JobRequest]]:
        """Advance the plan in flight; returns ``queued`` less its waiting job when it was admitted here."""
        out = list(queued)
        found = _in_flight(self.ctx)
        if found is None:
            return out
        head, plan = found
        self.in_flight = True
        if head.key in self.skip:  # its status write is in flight: keep holding, decide next pass
            self.held = _indices(self.ctx.view, plan.held_nodes)
            return out
        if _advance(self.ctx, self.skip, head, plan):
            return [entry for entry in out if entry[0].key != head.key]
        if plan_from_status(self.ctx.actions_for(head).draft.data) is not None:
            self.head, self.plan, self.held = head, plan, _indices(self.ctx.view, plan.held_nodes)
        return out

    @contextmanager
    def holding(self) -> Iterator[None]:
        """The held nodes take no other job inside the block (the FIFO admission, backfill included)."""
        with closed_nodes(self.ctx.view.state, self.held):
            yield

    def would_ask(self, head: JobObject) -> bool:
        """Whether :meth:`after` would ask the planner for ``head``, a line's blocked head the waiting memo
        would leave out, were it the first refused job (read from its object: the memo then looks at it, so a
        pass with the memo asks as one without)."""
        request = head.request
        if self.in_flight or self.head is not None or request is None:
            return False
        data = head.status.raw
        if head.phase is not Phase.QUEUED or data.get("reason") != UNSCHEDULABLE:
            return False
        if self.counted is None:  # admissions only take GPUs: a count before them never says "no" too soon
            self.counted = Counted(self.ctx)
        # the counts first: on a full cluster they say no at once, before the job's kind and filter are read
        return worth_asking(self.ctx, request, data, self.counted) and _refused_as(
            self.ctx, self.skip, head, request, head.phase, data
        )

    def after(
        self, queued: Sequence[tuple[JobObject, JobRequest]], quiet_heads: Sequence[JobObject] = ()
    ) -> None:
        """Say the plan in flight on its waiting job, or look for a plan for the first refused tray job.
        ``quiet_heads``: the blocked heads of lines the waiting memo left out; they stand in the order as a
        pass without the memo would decide them (one that :meth:`would_ask` for was looked at, so here it is
        one the planner is not asked for: it still comes first)."""
        ctx = self.ctx
        if self.head is not None and self.plan is not None:
            actions = ctx.actions_for(self.head)
            if actions.draft.phase is Phase.QUEUED:
                actions.draft.waiting(MOVING, planned_message(self.plan, ctx.view, ctx.now_s), ctx.now)
            else:  # placed by the admission meanwhile (room came up elsewhere): the plan is done with
                actions.draft.set(movePlan=None)
            return
        if self.in_flight:
            return
        candidates = [(job, request, False) for job, request in queued]
        candidates += [(job, job.request, True) for job in quiet_heads if job.request is not None]
        for job, request, quiet in sorted(candidates, key=lambda e: (-e[1].spec.priority, e[0].queued_at, e[0].key)):
            if quiet:
                if _refused_as(ctx, self.skip, job, request, job.phase, job.status.raw):
                    return
                continue
            if _refused(ctx, self.skip, job, request):  # the first one only: one plan at a time
                if worth_asking(ctx, request, ctx.actions_for(job).draft.data):
                    why_not = _why_not_planned(ctx, request)
                    if why_not is None:
                        _plan(ctx, self.skip, job, request)
                    else:
                        ctx.actions_for(job).draft.set(moveCheck={"checkedAt": ctx.now, "answer": why_not})
                return


def _in_flight(ctx: PassContext) -> tuple[JobObject, MovePlanRecord] | None:
    found = [(job.queued_at, job.key, job) for job in ctx.jobs.values() if "movePlan" in job.status.raw]
    for _, _, job in sorted(found):
        plan = plan_from_status(job.status.raw)
        if plan is not None and not job.deleting:
            return job, plan
    return None


def _indices(view: ClusterView, names: Sequence[str]) -> tuple[int, ...]:
    index = {name: i for i, name in enumerate(view.topology.node_names)}
    return tuple(index[n] for n in names if n in index)


def _refused(ctx: PassContext, skip: Collection[str], job: JobObject, request: JobRequest) -> bool:
    """A rigid ParallelJob this pass refused for want of room, whose queue allows moves (whether moves are
    planned for it is :func:`_why_not_planned`'s)."""
    draft = ctx.actions_for(job).draft
    return _refused_as(ctx, skip, job, request, draft.phase, draft.data)


def _refused_as(
    ctx: PassContext, skip: Collection[str], job: JobObject, request: JobRequest, phase: Phase, data: Mapping[str, Any]
) -> bool:
    """:func:`_refused` on a phase and status given: this pass's draft, or a left-out job's object."""
    if job.key in skip or phase is not Phase.QUEUED or data.get("reason") != UNSCHEDULABLE:
        return False
    if not kind_of(request).renders_pods or sizing_of(request).resizes:  # moves are for rigid ParallelJobs
        return False
    if request.mig_profile or request.mps_percent:  # packed onto used GPUs: freeing a domain would be backwards
        return False
    return bounds_of(ctx, request).moves.max_moves_per_hour > 0 and _unfiltered(ctx, job.key, request)


def _why_not_planned(ctx: PassContext, request: JobRequest) -> str | None:
    """Why moves are not planned for a refused job (None: they are): on a cluster with NVLink cliques only
    a job that takes whole trays is planned for (the planner works on the NVLink topology), not one that
    takes none, such as an HGX job beside NVL72 racks."""
    if nvlink_topology(ctx.view) is not None and wants_trays(ctx.view, request) is None:
        return (
            "no moves planned: on a cluster with NVLink cliques moves free room only for jobs that take whole"
            " trays, and this one takes none (it waits as before)"
        )
    return None


def _unfiltered(ctx: PassContext, key: str, request: JobRequest) -> bool:
    node_filter = ctx.eligibility.filter_for(key, request.spec, with_usage=False)
    return node_filter is None or node_filter.allowed is None


@contextmanager
def _planner(ctx: PassContext, request: JobRequest) -> Iterator[tuple[ClusterState, PlacerLike]]:
    """The waiting job's own topology and placer over the view's state, as its admission's: the NVLink
    topology and placer for a tray job, the view's state and the core placer on HGX."""
    topology = nvlink_topology(ctx.view)
    if topology is None:
        yield ctx.view.state, Placer(ctx.view.state, OPERATOR_PLACER)
        return
    with seen_as(ctx.view.state, topology) as state:
        yield state, _placer_on(ctx, request, state)


def _placer_on(ctx: PassContext, request: JobRequest, state: ClusterState) -> PlacerLike:
    if nvlink_topology(ctx.view) is None:
        return Placer(state, OPERATOR_PLACER)
    spares = spares_for(ctx.view, ctx.queues.get(request.queue))
    return NVLinkPlacer(state, TRAY_PLACER, spares, request.rank_order)


def scratch_state(state: ClusterState) -> ClusterState:
    """A copy of ``state`` for the planner, whose tries are trials of their own: the reconciler's pass is one
    already, and trials do not nest. O(GPUs), once per plan asked (at most every ``ASK_EVERY_S`` per job)."""
    copy = ClusterState(state.topology)
    for allocation in state.allocations.values():
        copy.allocate(allocation)
    for holder, gpus in state.assumed.items():
        copy.assume(holder, gpus)
    for gpu, health in enumerate(state.health):
        if health is not GPUHealth.HEALTHY:
            copy.set_health(gpu, health)
    for node, schedulable in enumerate(state.node_schedulable):
        if not schedulable:
            copy.set_node_schedulable(node, False)
    return copy


def movable(ctx: PassContext, skip: Collection[str], job: JobObject) -> MovableJob | None:
    """A job holding GPUs as the planner sees it (None: not a ParallelJob with a priced placement)."""
    request, record = job.request, job.record
    allocation = ctx.view.state.allocations.get(job.key)
    if request is None or record is None or record.cost is None or allocation is None:
        return None
    actions = ctx.actions_for(job)
    now_s = ctx.now_s
    started = parse_time(job.status.start_time) or now_s
    why = ""
    if actions.draft.phase is not Phase.RUNNING or actions.migrated or job.key in skip:
        why = "not running, or already being moved"
    elif not kind_of(request).renders_pods or sizing_of(request).resizes or preemption_of(actions.draft.data):
        why = "a pod group, an elastic job or one being preempted"
    elif not _unfiltered(ctx, job.key, request):
        why = "its node filter decides where it may run"
    elif is_ending(actions):
        why = "some of its ranks have finished: it is ending"
    spec = replace(request.spec, job_id=job.key)
    nvlink = nvlink_topology(ctx.view)
    topology = nvlink or ctx.view.topology
    cost = placement_cost(topology, spec, allocation.groups, cost_model(request.cost_model)).total_ms
    # its pods are whole trays (one per tray, in a ComputeDomain): moved onto an HGX node they would be neither
    keep_off = clique_index(nvlink).single_nodes if nvlink is not None and layout_of(record) is TRAYS else ()
    interval = request.checkpoint.interval_seconds
    end = started + request.expected_runtime_s if request.expected_runtime_s is not None else None
    return MovableJob(
        spec, cost, started, float(interval) if interval else math.inf, last_checkpoint(job, request, started, now_s),
        last_moved(job.status.raw), end, movable=not why, why_not=why, keep_off=keep_off,
    )  # fmt: skip


def moves_last_hour(ctx: PassContext) -> int:
    return sum(
        1 for job in ctx.jobs.values() if (t := last_room_move(job.status.raw)) is not None and ctx.now_s - t < HOUR_S
    )


def move_request(ctx: PassContext, skip: Collection[str], job: JobObject, request: JobRequest) -> MoveRequest:
    running = [movable(ctx, skip, ctx.jobs[key]) for key in sorted(ctx.view.state.allocations) if key in ctx.jobs]
    return MoveRequest(
        replace(request.spec, job_id=job.key),
        tuple(r for r in running if r is not None),
        bounds_of(ctx, request).moves,
        ctx.now_s,
        moves_last_hour(ctx),
    )


def _plan(ctx: PassContext, skip: Collection[str], job: JobObject, request: JobRequest) -> None:
    move = move_request(ctx, skip, job, request)
    with _planner(ctx, request) as (seen, _):
        state = scratch_state(seen)
    decision = plan_moves(
        state, _placer_on(ctx, request, state), cost_model(request.cost_model), move,
        placer_for=lambda domain: _placer_on(ctx, request, domain),  # tries on each candidate domain alone
    )  # fmt: skip
    actions = ctx.actions_for(job)
    if not isinstance(decision, MovePlan):
        actions.draft.set(moveCheck={"checkedAt": ctx.now, "answer": "; ".join(decision.reasons)})
        return
    names = ctx.view.topology.node_names
    plan = MovePlanRecord(
        ctx.now_s,
        decision.domain,
        tuple(names[n] for n in decision.held_nodes),
        tuple(PlannedMove(m.job_id, m.when, m.at_s, m.lost_work_gpu_s) for m in decision.moves),
        decision.lost_work_gpu_s,
        "; ".join(decision.reasons),
    )
    actions.draft.set(movePlan=plan_to_status(plan), moveCheck=None)
    actions.note("Normal", "MovePlanned", plan.message)
    if not _advance(ctx, skip, job, plan) and plan_from_status(actions.draft.data) is not None:
        actions.draft.waiting(MOVING, planned_message(plan, ctx.view, ctx.now_s), ctx.now)


def _advance(ctx: PassContext, skip: Collection[str], head: JobObject, plan: MovePlanRecord) -> bool:
    """Carry out what is due; True when the waiting job was admitted here."""
    actions, view = ctx.actions_for(head), ctx.view
    request = head.request
    if request is None or actions.draft.phase is not Phase.QUEUED:
        actions.draft.set(movePlan=None)  # admitted some other way (room came up elsewhere), or it ended
        return False
    held = _indices(view, plan.held_nodes)
    why = _broken(ctx, plan, held, bounds_of(ctx, request).moves.max_wait_s)
    if why is None:
        for move in plan.moves:
            why = _carry(ctx, skip, head, plan, move, held)
            if why is not None:
                break
    if why is not None:
        dropped(actions, plan, why, ctx.now)
        return False
    if _jobs_on(view, held):
        _wake(actions, plan, ctx.now_s)
        return False
    return _admit(ctx, head, request, plan)


def _broken(ctx: PassContext, plan: MovePlanRecord, held: Sequence[int], slack_s: float) -> str | None:
    """Why the plan no longer holds, or None."""
    state = ctx.view.state
    topology = state.topology
    if len(held) != len(plan.held_nodes):
        return "a held node is gone"
    for n in held:
        if not state.node_schedulable[n] or any(
            state.health[g] is not GPUHealth.HEALTHY for g in topology.node_gpus(n)
        ):
            return f"held node {topology.node_names[n]} failed or was cordoned"
    others = sorted(set(_jobs_on(ctx.view, held)) - {m.job for m in plan.moves})
    if others:
        return f"{', '.join(others)} took GPUs on the held nodes"
    last = max((m.at_s for m in plan.moves), default=plan.created_s)
    if ctx.now_s > last + slack_s and _jobs_on(ctx.view, held):
        return f"the moves were due by {format_time(last)} and are not all done"
    return None


def _jobs_on(view: ClusterView, held: Sequence[int]) -> list[str]:
    topology = view.state.topology
    return view.state.jobs_on([g for n in held for g in topology.node_gpus(n)])


def _carry(
    ctx: PassContext, skip: Collection[str], head: JobObject, plan: MovePlanRecord, move: PlannedMove,
    held: Sequence[int],
) -> str | None:  # fmt: skip
    """Move one job of the plan if it is due and still on the held nodes; why the plan fails, or None."""
    job = ctx.jobs.get(move.job)
    if job is None or move.job not in _jobs_on(ctx.view, held) or move.when is MoveWhen.AT_END:
        return None  # moved already, ended (out of the way), or waited for until it ends
    if job.key in skip:
        return None  # its own write is in flight: next pass
    found = movable(ctx, skip, job)
    if found is None:
        return f"{job.key} holds no priced placement any more"
    if not found.movable:
        busy = ctx.actions_for(job).draft.phase is not Phase.RUNNING or ctx.actions_for(job).migrated
        return None if busy else f"{job.key} can no longer be moved: {found.why_not}"
    if move.when is MoveWhen.AT_CHECKPOINT:
        checkpointed = found.last_checkpoint_at
        if checkpointed is None or checkpointed <= plan.created_s:
            return None  # not yet: its next checkpoint is what it waits for
    assert head.request is not None and job.request is not None and job.record is not None
    with _planner(ctx, head.request) as (state, placer):
        model = cost_model(job.request.cost_model)
        best = place_elsewhere(state, placer, model, found, held, bounds_of(ctx, head.request).moves)
    if isinstance(best, str):
        return best
    if layout_of(job.record) is HGX and spans_trays(ctx.view, best.groups):
        return f"{job.key} would have a TP group over two trays, which its pods cannot take"
    lost = float(round(found.lost_now_gpu_s(ctx.now_s)))  # whole GPU-seconds: the message and record agree
    actions = ctx.actions_for(job)
    pods = ctx.pods_of(job)
    message = moved_note(head.key, plan, lost, move.when)
    new = relocate(ctx, HeldJob(actions, job, job.request, job.record, pods), best, message)
    actions.draft.set(
        lastRoomMove={"time": ctx.now, "for": head.key, "domain": plan.domain, "lostGpuSeconds": lost}
    )
    actions.draft.condition("MovedForRoom", "True", "MadeRoom", message, ctx.now)
    actions.note("Normal", "MovedForRoom", message)
    actions.room_moved_gpu_s = lost
    sync_pods(actions, job, job.request, new, pods, ctx.view.nodes, ctx.gpu_holders)
    return None


def _wake(actions: JobActions, plan: MovePlanRecord, now_s: float) -> None:
    """Pass again when the next move is due (a checkpoint by the interval changes no object)."""
    due = [m.at_s for m in plan.moves if m.at_s > now_s]
    wake = min(due) if due else now_s + ASK_EVERY_S / 10
    actions.wake_at = wake if actions.wake_at is None else min(actions.wake_at, wake)


def _place_head(ctx: PassContext, head: JobObject, request: JobRequest) -> Placement:
    """Where the waiting job goes now: on trays by the NVLink placer, on HGX by the core placer."""
    topology = nvlink_topology(ctx.view)
    if topology is None:
        spec = replace(request.spec, job_id=head.key)
        return Placer(ctx.view.state, OPERATOR_PLACER).place(spec, cost_model(request.cost_model))
    if wants_trays(ctx.view, request) is None:
        raise PlacementInfeasible(head.key, ["the cluster has NVLink cliques now, and the job takes no trays"])
    spares = spares_for(ctx.view, ctx.queues.get(request.queue))
    return place_on_trays(ctx.view, topology, request, head.key, None, spares)


def _admit(ctx: PassContext, head: JobObject, request: JobRequest, plan: MovePlanRecord) -> bool:
    """Place the waiting job now that the held nodes are empty (anywhere: the planner's choice is the held
    nodes, but a cheaper room that came up meanwhile is taken as the simulator does)."""
    actions = ctx.actions_for(head)
    try:
        placement = _place_head(ctx, head, request)
    except PlacementInfeasible as exc:
        dropped(actions, plan, f"the held room did not take it: {'; '.join(exc.reasons[:2])}", ctx.now)
        return False
    ctx.view.state.allocate(Allocation(head.key, placement.groups, request.spec.memory_per_gpu_gb))
    actions.draft.set(movePlan=None)
    actions.room_plan_made_s = plan.created_s  # for paralleljob_room_move_wait_seconds
    record_admission(ctx, head, request, placement, (f"placed in room freed by moves ({plan.domain})",))
    return True

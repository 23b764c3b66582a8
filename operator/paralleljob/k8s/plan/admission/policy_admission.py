"""Admission through the core's queueing pass (``--queue-policy fair|fair-backfill|fair-backfill-preempt``).

The queued jobs, the jobs holding GPUs and the ParallelJobQueues are mapped to the core's inputs
(``k8s/edge/parse/queues.py``); ``core.admit.admission.schedule`` returns one decision per job, each with its
reasons, and this module carries them out through the same status machinery as the strict-FIFO path:

- ``Admit``: the placement is recorded in the status (Queued -> Placing), then pods are created and bound;
- ``Wait`` / ``Reserve``: the ``Placed`` condition says why, and a reservation says when it expects to start;
  a ``Wait`` that can never be met fails the job (unless it ran before: then the missing room is assumed to
  be broken hardware that will come back);
- ``ShrinkReplicas``: growth replicas of lower-priority elastic jobs are taken (``elastic_admission``), and
  the job they made room for is admitted in the same pass (an ``Admit`` follows); an elastic job is admitted
  at the size the core chose (its minimum is all the quota counts on until then);
- ``Preempt``: each victim gets ``status.preemption {deadline, for}``, a ``PreemptionPending`` condition, an
  Event, and the checkpoint-now annotation on its pods (``k8s/plan/moves/preempting.py`` finishes the preemption when
  the deadline passes, on whichever pass, by whichever operator, comes first).

A job that victims are already making room for is not scheduled again until they have stopped: it waits
with the reason, and the victims cannot be chosen twice. Nothing here talks to the API.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from paralleljob.core.admit.admission import (
    Admit,
    PlaceOn,
    Preempt,
    QueueSnapshot,
    Reserve,
    SchedulingPlan,
    ShrinkReplicas,
    Wait,
    schedule,
)
from paralleljob.core.admit.gates import WaitReason, entry_gate
from paralleljob.core.admit.queueing import PendingJob, QueuePolicy, RunningJob
from paralleljob.core.placing.eligibility import FilteredPlacer
from paralleljob.core.timing.cost import cost_model
from paralleljob.k8s.edge.parse.queues import format_time, pending_job, queue_spec
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.admission.fifo_admission import (
    entry_of,
    fail_unschedulable,
    node_filters,
    record_admission,
    refuse_before_queueing,
)
from paralleljob.k8s.plan.admission.trayadmission import TrayAwarePlacer
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.kinds.elastic_admission import commit_shrinks
from paralleljob.k8s.plan.kinds.picker import sizing_of
from paralleljob.k8s.plan.moves.preempting import request_checkpoint, start_preemption
from paralleljob.k8s.plan.slices.book import sliced_note
from paralleljob.k8s.plan.slices.mpsbook import mps_note


def admit_with_core(
    ctx: PassContext,
    queued: Sequence[tuple[JobObject, JobRequest]],
    held: Sequence[tuple[JobObject, JobRequest, bool]],
    running: Mapping[str, RunningJob],
    policy: QueuePolicy,
    making_room: Mapping[str, tuple[float, list[str]]],
) -> tuple[list[float], SchedulingPlan | None]:
    """One queueing pass; returns the time it took (seconds) and the core's plan (None: nothing to decide).
    ``held``: the jobs holding GPUs and whether they may be preempted; ``making_room``: waiting job key ->
    (deadline, victims) of preemptions already under way for it."""
    actions_for, view, placer, queues = ctx.actions_for, ctx.view, ctx.placer, ctx.queues
    now_s = ctx.now_s
    jobs: dict[str, tuple[JobObject, JobRequest]] = {}
    pending: list[PendingJob] = []
    for job, request in queued:
        if refuse_before_queueing(ctx, job, request):
            continue
        # an elastic job is gated and queued at its minimum; the core admits it at the largest size that fits
        # (``ranges`` below)
        request = sizing_of(request).at_minimum(request)
        room = None
        if job.key in making_room:
            deadline, victims = making_room[job.key]
            room = f"preempting {', '.join(sorted(victims))}; their pods stop by {format_time(deadline)}"
        gate = entry_gate(entry_of(ctx, job, request, room))
        if gate is not None:
            ctx.wait(actions_for(job), gate.reason, gate.message)
        else:
            jobs[job.key] = (job, request)
            pending.append(pending_job(job, request, now_s))
    if not pending or view.empty:
        return [], None
    requests = {key: request for key, (_, request) in jobs.items()}
    by_key = {job.key: (job, request) for job, request, _ in held}
    models = {name: cost_model(name) for name in {r.cost_model for r in requests.values()}}
    filtered = FilteredPlacer(placer, view.state, node_filters(ctx.eligibility))
    wrapped = TrayAwarePlacer(view, filtered, requests, node_filters(ctx.eligibility), queues)  # NVL72 trays
    specs = [queue_spec(q) for q in queues.values()]
    # Elastic: every waiting one (the core guarantees it min), and the running ones that may lose replicas.
    ranges = {key: rng for key, (job, r) in jobs.items() if (rng := sizing_of(r).range(r)) is not None}
    ranges.update(
        {k: rng for k, h in ctx.shrinkable.items() if (rng := sizing_of(h.request).range(h.request)) is not None}
    )
    started = ctx.clock()
    plan = schedule(
        PlaceOn(view.state, wrapped, lambda spec: models[requests[spec.job_id].cost_model]),
        QueueSnapshot(pending, list(running.values()), specs, now_s, ranges),
        policy,
    )
    durations = [ctx.clock() - started]
    preempting: set[str] = {d.for_job for d in plan.decisions if isinstance(d, Preempt)}
    for decision in plan.decisions:
        if isinstance(decision, Admit):
            job, request = jobs[decision.job_id]
            sizing = sizing_of(request)
            request = sizing.at_admitted_size(request, decision.placement.dp)
            record_admission(ctx, job, request, decision.placement, decision.reasons)
            sizing.admitted(ctx, actions_for(job), request)
        elif isinstance(decision, ShrinkReplicas):
            commit_shrinks(ctx, jobs[decision.for_job][0], decision.resizes)
        elif isinstance(decision, Wait):
            job, _ = jobs[decision.job_id]
            _wait(ctx, actions_for(job), decision)
        elif isinstance(decision, Reserve):
            job, _ = jobs[decision.job_id]
            if decision.job_id in preempting:
                continue  # the Preempt decision says more
            when = format_time(decision.start_by) if math.isfinite(decision.start_by) else "unknown"
            why = "; ".join(decision.reasons)
            message = f"{why}; expected start: {when}"
            ctx.wait(actions_for(job), WaitReason.RESERVED, message)  # its expected start moves every pass
        else:
            _preempt(ctx, jobs, by_key, decision)
    return durations, plan


def _wait(ctx: PassContext, actions: JobActions, decision: Wait) -> None:
    message = "; ".join(decision.reasons)
    if decision.permanent:  # never fits, and never ran (the core's rule, core.admit.gates.fails_for_good)
        fail_unschedulable(actions, message, ctx.now)
        return
    if decision.reason is WaitReason.UNSCHEDULABLE:
        message += sliced_note(ctx.view) + mps_note(ctx.view)
    ctx.wait(actions, decision.reason, message)


def _preempt(
    ctx: PassContext,
    jobs: Mapping[str, tuple[JobObject, JobRequest]],
    held: Mapping[str, tuple[JobObject, JobRequest]],
    decision: Preempt,
) -> None:
    actions_for, pods_of, now, now_s = ctx.actions_for, ctx.pods_of, ctx.now, ctx.now_s
    waiting, _ = jobs[decision.for_job]
    deadline = now_s + decision.grace_period_s
    why = "; ".join(decision.reasons)
    for key in decision.victims:
        victim, _ = held[key]
        actions = actions_for(victim)
        start_preemption(actions, waiting.key, deadline, why, now)
        request_checkpoint(actions, pods_of(victim), format_time(deadline))
    message = (
        f"preempting {', '.join(decision.victims)} ({decision.lost_work_gpu_s:.0f} GPU-s of work since their last"
        f" checkpoint); their pods stop by {format_time(deadline)}: {why}"
    )
    actions = actions_for(waiting)
    actions.draft.waiting("Preempting", message, now)
    actions.note("Normal", "Preempting", message)

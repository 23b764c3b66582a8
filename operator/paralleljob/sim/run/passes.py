"""One scheduling pass of the simulator: its steps in the core's order, each carried out as the operator does.

The engine calls :func:`scheduling_pass` whenever a pass is due; it walks ``core.admit.passorder.PASS_ORDER``
(move repaired jobs back, grow elastic jobs, fail the jobs that can never fit, the queue's pass, moves that
free room), the order the operator's reconcile pass takes them in. The queue's pass is the operator's FIFO
(``core.admit.fifo.schedule_fifo``, :func:`fifo_pass`) or the core's queueing planner
(``core.admit.admission.schedule``, :func:`core_pass`), both with the operator's inputs: the caps, every job's
entry gate (``sim/run/lines.py``; on the core's pass a job whose preemption victims are still stopping is held
with Preempting, and the victims are offered to no other preemption; a preemption whose waiting job no longer
waits, or whose victim stopped running, is cancelled first, by ``core.admit.preemption.preemption_stands``),
and "never fits" decided for every queued job before the queue's pass, wherever it stands in its line
(``core.admit.gates.fails_for_good`` over the placer's ``never_fits``, as the operator's
``fifo_admission.refuse_before_queueing``).
"""

from __future__ import annotations

from typing import cast

from paralleljob.core.admit import admission, queueing
from paralleljob.core.admit.fifo import FifoHooks, schedule_fifo
from paralleljob.core.admit.gates import fails_for_good
from paralleljob.core.admit.passorder import PASS_ORDER, PassStep
from paralleljob.core.elastic import resized
from paralleljob.core.lifecycle import Event as Step
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.eligibility import never_fits
from paralleljob.core.placing.placer import Placer
from paralleljob.sim.run import disruptions, elastic, roommoves
from paralleljob.sim.run.core_queue import CoreQueue, last_checkpoint_at
from paralleljob.sim.run.events import Kind
from paralleljob.sim.run.lines import QueueLines
from paralleljob.sim.run.policies import FifoQueue
from paralleljob.sim.run.surface import SimulationSurface


def scheduling_pass(sim: SimulationSurface) -> None:
    """Every step of one pass, in :data:`PASS_ORDER`; a step the run's policy does not use is skipped. First,
    as the operator's pass decides each running job before the pass's steps, every preemption under way is
    asked whether it still stands (``core.admit.preemption.preemption_stands``)."""
    if sim.preempting:
        disruptions.standing_preemptions(sim)
    for step in PASS_ORDER:
        if step is PassStep.MOVE_BACK and sim.policy.reoptimize and sim.dearer:
            disruptions.reoptimize_pass(sim)
        elif step is PassStep.GROW and sim.config.elastic > 0:
            elastic.grow_pass(sim)
        elif step is PassStep.NEVER_FITS:
            refuse_never_fitting(sim)
        elif step is PassStep.ADMIT:
            if isinstance(sim.queue, CoreQueue):
                core_pass(sim, sim.queue)
            else:
                fifo_pass(sim, sim.queue)
        elif step is PassStep.MAKE_ROOM and sim.policy.moves is not None:
            roommoves.moves_pass(sim)


def refuse_never_fitting(sim: SimulationSurface) -> None:
    """Fail every waiting job that can never fit and never ran (an elastic job at its minimum), before the
    queue's pass and wherever it stands, as the operator's ``refuse_before_queueing``. The verdict depends on
    the topology and the job's shape alone, so a job found to fit is not asked again."""
    now = sim.clock.now()
    for waiting in list(sim.queue.candidates(now)):
        job = sim.jobs[waiting.job_id]
        if job.fits_somewhere or job.ran_before:
            continue
        smallest = job.full_spec if job.elastic is not None and job.full_spec is not None else job.spec
        if job.elastic is not None:
            smallest = resized(smallest, job.elastic.min)
        reasons = never_fits(sim.topology, smallest)
        if not fails_for_good(bool(reasons), job.ran_before):
            job.fits_somewhere = True
            continue
        sim.queue.remove(job.job_id)
        job.step(Step.REJECTED)
        sim.reject_done(job, "; ".join(reasons))


def _admitted(sim: SimulationSurface, decision: admission.Admit) -> None:
    job = sim.jobs[decision.job_id]
    sim.queue.remove(job.job_id)
    sim.count_allocation(sim.state.allocations[job.job_id], +1)  # the pass allocated it
    job.step(Step.ADMITTED)
    sim.placed(job, decision.placement.groups, decision.placement.cost.total_ms)
    sim.events.push(sim.clock.now() + sim.config.start_latency_s, Kind.START, job.job_id, (job.epoch,))


def fifo_pass(sim: SimulationSurface, queue: FifoQueue) -> None:
    """One pass of the operator's FIFO (``core.admit.fifo.schedule_fifo``) with the operator's inputs: a line
    per queue (one for the whole trace, or one per tenant under ``--quotas``), each queue's GPUs in use and
    its cap, every job's entry gate and whether it ran before."""
    now = sim.clock.now()
    lines = QueueLines(sim.tenants, queue.name, sim.topology.num_gpus > 0)
    # the arrival rank orders a line as queue time does (a requeued job keeps or ends its rank)
    waiting = [lines.fifo_job(sim.jobs[w.job_id], float(w.order)) for w in queue.candidates(now)]
    # an elastic job is admitted at the largest size that fits its queue's room, by the operator's rule
    # (core/elastic.py), and a rigid job that does not fit takes lower-priority growth replicas first
    hooks = FifoHooks(
        place_elastic=lambda fifo_job, room: elastic.admit(sim, sim.jobs[fifo_job.spec.job_id], room),
        take_growth=lambda fifo_job: elastic.take_growth_replicas(sim, sim.jobs[fifo_job.spec.job_id]),
    )
    # The planner is typed for the core Placer; the baselines have its place() shape, which is all it calls.
    place_on = admission.PlaceOn(sim.state, cast(Placer, sim.placer), sim.model)
    for decision in schedule_fifo(place_on, lines.of(waiting), queue.policy, hooks):
        if isinstance(decision, admission.Admit):
            _admitted(sim, decision)
        elif decision.permanent:  # never fits and never ran: the core's rule (core.admit.gates.fails_for_good)
            job = sim.jobs[decision.job_id]
            queue.remove(job.job_id)
            job.step(Step.REJECTED)
            sim.reject_done(job, "; ".join(decision.reasons))
            sim.request_schedule()  # it held its line this pass: the jobs behind it are tried again now


def making_room(sim: SimulationSurface) -> dict[str, tuple[float, list[str]]]:
    """Waiting job -> (latest deadline, victims) of the preemptions under way for it whose victims still run,
    as the operator's ``preempting.making_room`` reads them from the victims' ``status.preemption``."""
    out: dict[str, tuple[float, list[str]]] = {}
    for victim, (for_job, deadline) in sorted(sim.preempting.items()):
        if sim.jobs[victim].phase is not Phase.RUNNING:
            continue
        before = out.get(for_job, (deadline, []))
        out[for_job] = (max(before[0], deadline), [*before[1], victim])
    return out


def core_pass(sim: SimulationSurface, queue: CoreQueue) -> None:
    """One pass of the core's admission planner, each waiting job first through the operator's entry gate."""
    now = sim.clock.now()
    running = []
    for job_id in sorted(sim.running):
        job = sim.jobs[job_id]
        running.append(
            queueing.RunningJob(
                job.spec, job.trace.tenant, sim.running[job_id].started_s, last_checkpoint_at(job, now),
                sim.expected_end.get(job_id),
                # as the operator offers victims: a Running job (not restarting) not being preempted already
                preemptible=job_id not in sim.preempting and disruptions.seen_phase(sim, job) is Phase.RUNNING,
            )
        )  # fmt: skip
    # A job placed but not started yet holds its GPUs too, so it counts against its tenant's maximum, as
    # the operator's queue counts every admitted job, not only running pods. It has nothing to lose and
    # is about to start, so it is not offered as a preemption victim.
    for job_id in sorted(set(sim.state.allocations) - set(sim.running)):
        job = sim.jobs[job_id]
        running.append(queueing.RunningJob(job.spec, job.trace.tenant, now, None, None, preemptible=False))
    lines = QueueLines(sim.tenants, queue.name, sim.topology.num_gpus > 0)
    room = making_room(sim)
    gated = set()
    for waiting in queue.candidates(now):
        under_way = room.get(waiting.job_id)
        note = None if under_way is None else lines.preempting_note(under_way[1], under_way[0])
        if lines.gate(sim.jobs[waiting.job_id], note) is not None:
            gated.add(waiting.job_id)  # it waits with the gate's reason, decided by no pass until it opens
    ranges = elastic.ranges_for_pass(sim, queue)
    held = dict(sim.state.allocations)  # what the planner may shrink (it updates the state itself)
    plan = admission.schedule(
        admission.PlaceOn(sim.state, cast(Placer, sim.placer), sim.model),
        admission.QueueSnapshot(queue.pending(sim.jobs, gated), running, queue.queues, now, ranges),
        queue.policy,
    )
    queue.jain.append(plan.jain_index)
    for decision in plan.decisions:
        if isinstance(decision, admission.ShrinkReplicas):
            for resize in decision.resizes:
                elastic.apply_resize(sim, sim.jobs[resize.job_id], resize, planned=held[resize.job_id])
                sim.jobs[resize.job_id].shrinks += 1
        elif isinstance(decision, admission.Admit):
            job = sim.jobs[decision.job_id]
            if job.elastic is not None and job.full_spec is not None:
                job.spec = resized(job.full_spec, decision.placement.dp)
            _admitted(sim, decision)
        elif isinstance(decision, admission.Wait) and decision.permanent:
            # never fits and never ran: the core's rule (core.admit.gates.fails_for_good)
            job = sim.jobs[decision.job_id]
            queue.remove(job.job_id)
            job.step(Step.REJECTED)
            sim.reject_done(job, "; ".join(decision.reasons))
        elif isinstance(decision, admission.Preempt):
            deadline = now + decision.grace_period_s
            for victim in decision.victims:
                if victim not in sim.preempting:
                    sim.preempting[victim] = (decision.for_job, deadline)
                    sim.events.push(deadline, Kind.PREEMPT, victim)

"""What interrupts a running job in the simulation: failures and repairs, preemption, and moving a repaired job
back at a checkpoint (re-optimisation).

Each failure is handed to the core's failure policy (:func:`paralleljob.core.failure.repair.decide_repair`, the function
the operator calls) and its decision carried out with events; the move-back asks the core which jobs to
re-price and when (:func:`paralleljob.core.reoptimize.reprice_now`), the best placement now, and
:func:`paralleljob.core.reoptimize.decide_migration` whether it pays; a preemption under way is carried out
only while the core says it still stands (:func:`paralleljob.core.admit.preemption.preemption_stands`), asked
at every pass, when its victim fails and at its deadline, as the operator asks it at every pass. Module functions the
engine calls with itself as ``sim``, through its public surface (``sim/run/surface.py``); split out so the
engine's loop stays readable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paralleljob.core.admit.fifo import keeps_place
from paralleljob.core.admit.preemption import preemption_stands
from paralleljob.core.cluster import Allocation, GPUHealth
from paralleljob.core.failure.elastic_failure import counts_as_restart
from paralleljob.core.failure.recovery import affected_groups
from paralleljob.core.failure.repair import (
    FailureKind,
    FailureReport,
    GiveUp,
    Requeue,
    best_placement_now,
    decide_repair,
    pods_to_move,
)
from paralleljob.core.lifecycle import Event as Step
from paralleljob.core.lifecycle import Phase
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods_to_move
from paralleljob.core.placing.placement import Placement
from paralleljob.core.rankorder import DEFAULT_RANK_ORDER
from paralleljob.core.reoptimize import MoveBackAsk, decide_migration, reprice_now
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run import elastic
from paralleljob.sim.run.core_queue import CoreQueue
from paralleljob.sim.run.events import Kind, SimEvent
from paralleljob.sim.run.jobs import SimJob
from paralleljob.sim.run.surface import SimulationSurface

# ---- failures, repairs, preemption --------------------------------------------------------------


def push_failure(sim: SimulationSurface, failure: Failure) -> None:
    if failure.time < sim.failure_horizon:
        sim.events.push(failure.time, Kind.FAILURE, payload=(failure, True))


def on_failure(sim: SimulationSurface, event: SimEvent) -> None:
    failure, from_process = event.payload
    assert isinstance(failure, Failure)
    if from_process:
        push_failure(sim, sim.failures.next_after(sim.clock.now()))
    sim.tally.injected += 1
    sim.tally.by_cause[failure.cause] += 1
    sim.tally.by_scope[failure.scope.value] += 1
    node_gpus = list(sim.topology.node_gpus(failure.node))
    if not node_gpus:
        return
    if failure.scope is Scope.SOFTWARE:
        for job_id in sim.state.jobs_on(node_gpus):
            software_restart(sim, sim.jobs[job_id], set(node_gpus))
        return
    targets = node_gpus if failure.scope is Scope.NODE else [node_gpus[failure.gpu_index % len(node_gpus)]]
    broken = [g for g in targets if sim.state.health[g] is GPUHealth.HEALTHY]
    if not broken:
        sim.tally.on_broken_hardware += 1
        return
    sim.outage_tokens += 1
    for gpu in broken:
        sim.state.set_health(gpu, GPUHealth.OFFLINE)
        sim.down_token[gpu] = sim.outage_tokens
    sim.gpus_down += len(broken)
    sim.events.push(sim.clock.now() + failure.repair_s, Kind.REPAIR, payload=(sim.outage_tokens, tuple(broken)))
    kind = FailureKind.NODE if failure.scope is Scope.NODE else FailureKind.GPU
    for job_id in sim.state.jobs_on(broken):
        recover(sim, sim.jobs[job_id], kind)


def interrupt(sim: SimulationSurface, job: SimJob, *, graceful: bool) -> None:
    if job.phase is Phase.RUNNING:
        job.interrupt(sim.clock.now(), save_all=graceful)
        sim.running.pop(job.job_id, None)
        sim.expected_end.pop(job.job_id, None)
    else:
        job.epoch += 1  # placed but not started: cancel the pending START


def software_restart(sim: SimulationSurface, job: SimJob, node_gpus: set[int]) -> None:
    if job.phase is not Phase.RUNNING:
        return  # nothing runs yet, so nothing crashes
    sim.tally.jobs_interrupted += 1
    interrupt(sim, job, graceful=False)
    job.step(Step.WORKER_FAILED)
    groups = sim.state.allocations[job.job_id].groups
    repair(sim, job, FailureKind.WORKER, tuple(g for g, group in enumerate(groups) if node_gpus & set(group)))


def restart(sim: SimulationSurface, job: SimJob, *, move_back: bool = False) -> None:
    """Run again after ``--restart-overhead``, its GPUs held meanwhile: goodput lost to a failure, or the price
    of a move back (``move_back``), which no failure caused and the report counts apart."""
    overhead = sim.config.restart_overhead_s
    if move_back:
        job.move_gpu_s += overhead * job.num_gpus
    else:
        job.restart_gpu_s += overhead * job.num_gpus
    sim.begin(job, sim.clock.now() + overhead)
    if sim.policy.reoptimize or (isinstance(sim.queue, CoreQueue) and sim.queue.policy.preemption):
        # a pass once it runs again, as the operator's when it sees every pod bound: it may be re-priced, or
        # be a preemption victim again (a restarting job is neither)
        sim.events.push(sim.clock.now() + overhead, Kind.SCHEDULE)


def recover(sim: SimulationSurface, job: SimJob, kind: FailureKind) -> None:
    sim.tally.jobs_interrupted += 1
    interrupt(sim, job, graceful=False)
    job.step(Step.HARDWARE_FAILED)
    repair(sim, job, kind, tuple(affected_groups(sim.state, sim.state.allocations[job.job_id])))


def seen_phase(sim: SimulationSurface, job: SimJob) -> Phase:
    """``job``'s phase as the operator's status shows it: Recovering while it restarts (not every pod bound)."""
    if job.phase is Phase.RUNNING and sim.clock.now() < job.segment_start:
        return Phase.RECOVERING
    return job.phase


def preemption_standing(sim: SimulationSurface, victim: str) -> bool:
    """Whether the preemption under way on ``victim`` still stands (the core's rule); one that does not is
    cancelled (the victim keeps running, and the job it made room for, if it still waits, is planned for again)."""
    for_job, _ = sim.preempting[victim]
    waiting = sim.jobs.get(for_job)
    verdict = preemption_stands(seen_phase(sim, sim.jobs[victim]), for_job, None if waiting is None else waiting.phase)
    if not verdict.stands:
        del sim.preempting[victim]
        sim.tally.preemptions_cancelled += 1
        sim.request_schedule()
    return verdict.stands


def standing_preemptions(sim: SimulationSurface) -> None:
    """Ask the core about every preemption under way, as the operator's pass does for each victim."""
    for victim in sorted(sim.preempting):
        preemption_standing(sim, victim)


def repair(sim: SimulationSurface, job: SimJob, kind: FailureKind, groups: tuple[int, ...]) -> None:
    """Carry out the core's failure decision (core.failure.repair), the one the operator carries out too."""
    if job.job_id in sim.preempting:
        preemption_standing(sim, job.job_id)  # a victim that broke is Recovering: its preemption is cancelled
    old = sim.state.allocations[job.job_id]
    report = FailureReport(kind, groups, job.restarts)
    decision = decide_repair(sim.state, sim.placer, job.spec, sim.model, sim.failure_policy, report)
    new = sim.state.allocations.get(job.job_id)
    if new is not old:
        sim.count_allocation(old, -1)
        sim.room_epoch += 1  # its healthy GPUs may have been freed
        if new is not None:
            sim.count_allocation(new, +1)
    drop = elastic.drop_on_failure(sim, job, old, decision, kind, groups)
    job.restarts += counts_as_restart(kind, drop or decision)  # the operator's count (core.failure.elastic_failure)
    if drop is not None:
        restart(sim, job)  # the kept replicas' workers restart where they are, at the smaller size
        return
    if isinstance(decision, GiveUp):
        job.step(Step.GAVE_UP)
        job.gave_up = "; ".join(decision.reasons)
        sim.tally.gave_up += 1
        sim.unfinished -= 1
        sim.dearer.discard(job.job_id)
        sim.request_schedule()
        return
    if isinstance(decision, Requeue):
        if not keeps_place(sim.config.requeue_order, kind):  # the operator's rule (core.admit.fifo)
            job.order, job.queued_s = sim.next_rank, sim.clock.now()  # the back of the line
            sim.next_rank += 1
        job.step(Step.REQUEUED)
        job.requeues += 1
        sim.tally.requeued += 1
        sim.dearer.discard(job.job_id)
        sim.queue.add(sim.waiting_job(job), sim.clock.now())
        sim.request_schedule()
        return
    job.step(Step.REPAIRED)
    if decision.placement is not None:
        sim.placed(job, decision.placement.groups, decision.placement.cost.total_ms)
    sim.tally.recovered_in_place += 1
    restart(sim, job)


def on_repair(sim: SimulationSurface, event: SimEvent) -> None:
    token, gpus = event.payload
    assert isinstance(gpus, tuple)
    repaired = 0
    for gpu in gpus:
        if sim.down_token.get(gpu) == token:
            del sim.down_token[gpu]
            sim.state.set_health(gpu, GPUHealth.HEALTHY)
            repaired += 1
    sim.gpus_down -= repaired
    if repaired:
        sim.room_epoch += 1
        sim.request_schedule()


# ---- re-optimisation: moving a repaired job back -------------------------------------------------


def best_now(sim: SimulationSurface, job: SimJob) -> tuple[Placement, int] | None:
    """The placer's choice now, the job's own GPUs counted as free, and the pods a move there re-creates."""
    best = best_placement_now(sim.state, sim.placer, job.spec, sim.model)
    if best is None:
        return None
    if best.cost.total_ms >= job.cost_ms:
        return best, 0  # no saving: core.reoptimize says no whatever moves, so they are not counted
    current = sim.state.allocations[job.job_id]
    if isinstance(sim.placer, NVLinkPlacer) and sim.placer.spans_trays(current):  # a pod per tray, as the operator
        spec = job.spec
        moved = tray_pods_to_move(sim.state.topology, (spec.tp, spec.pp, spec.dp), DEFAULT_RANK_ORDER, current.groups,
                                  best.groups)  # fmt: skip
        return best, moved
    return best, pods_to_move(current.groups, best.groups)


def reoptimize_pass(sim: SimulationSurface) -> None:
    """For every running job above its ideal cost that the core says to re-price now, ask core.reoptimize
    whether to move back; if so, at the end of its next checkpoint write (no work is lost), as the operator
    would. A job at its ideal cost is not asked: no placement is cheaper (the operator re-prices it and finds
    it at its best)."""
    now = sim.clock.now()
    for job_id in sorted(sim.dearer - sim.migrating):
        job = sim.jobs[job_id]
        running = seen_phase(sim, job) is Phase.RUNNING
        # which jobs and when: the core's rule, the operator's too (a simulated job is never drained away; every
        # job in ``sim.dearer`` was placed above its ideal cost, by core.reoptimize.placed_dear)
        started = sim.running[job_id].started_s if job_id in sim.running else None
        ask = MoveBackAsk(running, job.restarts, False, True, sim.asked_at.get(job_id), running_since_s=started)
        if not reprice_now(ask, now).now:
            continue
        sim.asked_at[job_id] = now
        best = best_now(sim, job)
        if best is None:
            continue
        decision = decide_migration(
            job.cost_ms, best[0].cost.total_ms, best[1], job.plan.interval_s, sim.config.reoptimize_rule
        )
        if decision.migrate:
            period = job.plan.period_s
            boundary = job.segment_start + (math.floor((now - job.segment_start) / period) + 1) * period
            sim.migrating.add(job_id)
            sim.events.push(boundary, Kind.PREEMPT, job_id, (MoveBack(job.epoch),))


@dataclass(frozen=True, slots=True)
class MoveBack:
    """A PREEMPT event that moves a repaired job back at its checkpoint (not a preemption); ``epoch``: the
    job's when the move was decided (an interruption since makes it stale)."""

    epoch: int


def migrate(sim: SimulationSurface, job: SimJob) -> None:
    sim.migrating.discard(job.job_id)
    sim.asked_at[job.job_id] = sim.clock.now()  # priced again at its boundary, as the operator does
    best = best_now(sim, job)
    if best is None:
        return  # the room went meanwhile: keep running where it is
    decision = decide_migration(job.cost_ms, best[0].cost.total_ms, best[1], job.plan.interval_s,
                                sim.config.reoptimize_rule)  # fmt: skip
    if not decision.migrate:
        return  # the gain went meanwhile: keep running where it is
    interrupt(sim, job, graceful=True)  # right after a checkpoint: nothing is lost
    sim.release(job.job_id)
    # To the placement just priced, as the operator moves it: handing the NVLink placer the old trays as a
    # previous placement would read as a repair and keep every healthy tray, a restart that moves nothing.
    placement = best[0]
    sim.allocate(Allocation(job.job_id, placement.groups, job.spec.memory_per_gpu_gb))
    job.step(Step.MIGRATED, Step.REPAIRED)  # as the operator records it: Running -> Recovering -> Running
    sim.migrations += 1
    sim.asked_at.pop(job.job_id, None)  # a job that moved is priced afresh once it runs
    sim.placed(job, placement.groups, placement.cost.total_ms)
    restart(sim, job, move_back=True)


def on_preempt(sim: SimulationSurface, event: SimEvent) -> None:
    job = sim.jobs[event.job_id]
    if event.payload and isinstance(event.payload[0], MoveBack):
        if event.payload[0].epoch == job.epoch and job.phase is Phase.RUNNING:
            migrate(sim, job)
        else:
            sim.migrating.discard(job.job_id)  # interrupted meanwhile: decide again later
        return
    if job.job_id not in sim.preempting or not preemption_standing(sim, job.job_id):
        return  # cancelled since: the victim keeps running
    del sim.preempting[job.job_id]
    interrupt(sim, job, graceful=True)  # the grace period lets it checkpoint: nothing is lost
    job.step(Step.PREEMPTED, Step.REQUEUED)
    job.preemptions += 1
    sim.release(job.job_id)
    sim.queue.add(sim.waiting_job(job), sim.clock.now())
    sim.request_schedule()

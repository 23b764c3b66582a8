"""Moving running jobs out of the way of a job that fits nowhere only because the free GPUs are scattered:
the simulator carries out the core's :func:`~paralleljob.core.moves.plan_moves` (policies with ``moves``).

After each scheduling pass, the first job still waiting (the head) is handed to the planner with every
running job (its checkpoint interval and last checkpoint, its end, when it was last moved); a plan's GPUs are
held (closed to every other placement) until the moves are done, then the head is placed there and started,
as the operator admits it. A move now stops the job (losing its work since its checkpoint) and re-places it
where the plan's rule allows (``core.moves.place_elsewhere``, asked again since the cluster changed); a move
at a checkpoint is the move-back machinery's: an event at the job's next checkpoint boundary, after which
nothing is lost. ``relocate`` False (``ours-nvl72-preempt``) stops the jobs in the way and requeues them
instead, the baseline. One plan at a time; a plan whose waiting job left, or whose move cannot be carried
out any more, is dropped and its GPUs reopened. Module functions over the engine's public surface
(``sim/run/surface.py``), like ``disruptions``; the plan and tallies are the engine's ``room``
(``sim/run/roombook.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from paralleljob.core.cluster import Allocation
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.lifecycle import Event as Step
from paralleljob.core.lifecycle import Phase
from paralleljob.core.moves import MovableJob, MovePlan, MoveRequest, MoveWhen, place_elsewhere, plan_moves
from paralleljob.sim.run import disruptions
from paralleljob.sim.run.core_queue import CoreQueue, last_checkpoint_at
from paralleljob.sim.run.events import Kind, SimEvent
from paralleljob.sim.run.roombook import RoomBook
from paralleljob.sim.run.surface import SimulationSurface

ASK_EVERY_S = 300.0


@dataclass(frozen=True, slots=True)
class RoomMove:
    """A PREEMPT event that moves a job at its checkpoint for a plan; ``epoch``: the job's when planned."""

    epoch: int


def book(sim: SimulationSurface) -> RoomBook:
    return sim.room


def moves_pass(sim: SimulationSurface) -> None:
    room = book(sim)
    if room.plan is not None:
        _advance(sim, room)
        return
    head = _head(sim)
    if head is None:
        return
    key = (head, sim.room_epoch)
    now = sim.clock.now()
    if room.asked is not None and (
        room.asked[:2] == key or (room.asked[0] == head and now - room.asked[2] < ASK_EVERY_S)
    ):
        return  # nothing changed since the last "no", or it was asked a moment ago
    bounds = sim.policy.moves
    assert bounds is not None
    room.move_times = [t for t in room.move_times if now - t < 3600.0]
    request = MoveRequest(
        sim.jobs[head].spec, _running(sim, room, now), bounds, now, len(room.move_times),
        relocate=sim.policy.relocate,
    )  # fmt: skip
    # the waiting job's tries on each candidate domain alone, by a placer of the policy's kind over it
    decision = plan_moves(sim.state, sim.placer, sim.model, request, placer_for=sim.policy.make_placer)
    if not isinstance(decision, MovePlan):
        room.asked = (*key, now)
        return
    room.plan, room.plans, room.asked = decision, room.plans + 1, None
    room.pending = {m.job_id for m in decision.moves}
    for node in decision.held_nodes:
        sim.state.set_node_schedulable(node, False)
    for move in decision.moves:
        job = sim.jobs[move.job_id]
        if move.when is MoveWhen.NOW:
            _carry_out(sim, room, move.job_id, graceful=False)
        elif move.when is MoveWhen.AT_CHECKPOINT:
            period = job.plan.period_s
            boundary = job.segment_start + (math.floor((now - job.segment_start) / period) + 1) * period
            sim.events.push(boundary, Kind.PREEMPT, job.job_id, (RoomMove(job.epoch),))
    if room.plan is not None:
        _advance(sim, room)


def _head(sim: SimulationSurface) -> str | None:
    if isinstance(sim.queue, CoreQueue):
        return None  # the core queue's own preemption frees room there
    for waiting in sim.queue.candidates(sim.clock.now()):
        return waiting.job_id
    return None


def _running(sim: SimulationSurface, room: RoomBook, now: float) -> tuple[MovableJob, ...]:
    out = []
    for job_id in sorted(sim.state.allocations):
        job = sim.jobs[job_id]
        started = job.phase is Phase.RUNNING and now >= job.segment_start and job_id in sim.running
        busy = job_id in sim.migrating or job_id in sim.preempting
        out.append(
            MovableJob(
                job.spec, job.cost_ms, job.segment_start if started else now,
                job.plan.period_s, last_checkpoint_at(job, now), room.moved_at.get(job_id),
                sim.expected_end.get(job_id), movable=started and not busy,
                why_not="" if started and not busy else "not running, or already being moved",
            )
        )  # fmt: skip
    return tuple(out)


def _carry_out(sim: SimulationSurface, room: RoomBook, job_id: str, *, graceful: bool) -> None:
    """Move (or stop) one job of the plan; a move no longer possible drops the plan."""
    plan = room.plan
    job = sim.jobs[job_id]
    room.pending.discard(job_id)
    if plan is None or job.phase is not Phase.RUNNING or job_id not in sim.state.allocations:
        return
    now = sim.clock.now()
    if not sim.policy.relocate:
        lost = job.interrupt(now, save_all=graceful) / job.rate * job.num_gpus
        sim.running.pop(job_id, None)
        sim.expected_end.pop(job_id, None)
        job.step(Step.PREEMPTED, Step.REQUEUED)
        job.preemptions += 1
        sim.release(job_id)
        sim.dearer.discard(job_id)
        sim.queue.add(sim.waiting_job(job), now)  # keeps its place in the line
        room.stopped += 1
        room.lost_gpu_s += lost
        room.move_times.append(now)  # a stop spends the disruption budget and starts the cool-down too
        room.moved_at[job_id] = now
        return
    spec = next(j for j in _running(sim, room, now) if j.job_id == job_id)
    assert sim.policy.moves is not None
    placement = place_elsewhere(sim.state, sim.placer, sim.model, spec, plan.held_nodes, sim.policy.moves)
    if isinstance(placement, str):
        _drop(sim, room)
        return
    lost = job.interrupt(now, save_all=graceful) / job.rate * job.num_gpus
    sim.running.pop(job_id, None)
    sim.expected_end.pop(job_id, None)
    sim.release(job_id)
    sim.allocate(Allocation(job_id, placement.groups, job.spec.memory_per_gpu_gb))
    job.step(Step.MIGRATED, Step.REPAIRED)  # as the operator records a move: Running -> Recovering -> Running
    sim.placed(job, placement.groups, placement.cost.total_ms)
    disruptions.restart(sim, job, move_back=True)
    room.moves += 1
    room.move_times.append(now)
    room.moved_at[job_id] = now
    room.lost_gpu_s += lost
    room.restart_gpu_s += sim.config.restart_overhead_s * job.num_gpus


def _advance(sim: SimulationSurface, room: RoomBook) -> None:
    """Admit the waiting job once nothing of the plan is left on its GPUs; drop a plan whose job left."""
    plan = room.plan
    if plan is None:
        return
    waiting = sim.jobs.get(plan.waiting_job)
    if waiting is None or waiting.phase is not Phase.QUEUED:
        room.overtaken += 1  # placed by a pass meanwhile (room came up elsewhere), or gone
        room.dropped -= 1
        _drop(sim, room)
        return
    on_held = sim.state.jobs_on([g for n in plan.held_nodes for g in sim.topology.node_gpus(n)])
    if on_held:
        if set(on_held) - room.pending:
            _drop(sim, room)  # a job the plan no longer waits for holds them (put back by a repair): give up
        return
    _reopen(sim, room)
    try:
        placement = sim.placer.place(waiting.spec, sim.model)
    except PlacementInfeasible:
        room.dropped += 1
        return
    now = sim.clock.now()
    sim.queue.remove(waiting.job_id)
    sim.allocate(Allocation(waiting.job_id, placement.groups, waiting.spec.memory_per_gpu_gb))
    waiting.step(Step.ADMITTED)
    sim.placed(waiting, placement.groups, placement.cost.total_ms)
    sim.events.push(now + sim.config.start_latency_s, Kind.START, waiting.job_id, (waiting.epoch,))
    sim.request_schedule()


def _reopen(sim: SimulationSurface, room: RoomBook) -> None:
    if room.plan is not None:
        for node in room.plan.held_nodes:
            sim.state.set_node_schedulable(node, True)
    room.plan, room.pending = None, set()


def _drop(sim: SimulationSurface, room: RoomBook) -> None:
    room.dropped += 1
    _reopen(sim, room)
    sim.request_schedule()


def held_free(sim: SimulationSurface) -> int:
    """Free healthy GPUs on the nodes a plan holds (closed, so the state does not count them free)."""
    room = sim.room
    if room.plan is None:
        return 0
    return sum(sim.state.node_free[n] for n in room.plan.held_nodes)


def on_preempt(sim: SimulationSurface, event: SimEvent) -> None:
    """PREEMPT events: a plan's move at a checkpoint here, everything else to ``disruptions``."""
    if event.payload and isinstance(event.payload[0], RoomMove):
        room = book(sim)
        job = sim.jobs[event.job_id]
        if room.plan is not None and event.job_id in room.pending:
            if event.payload[0].epoch == job.epoch and job.phase is Phase.RUNNING:
                _carry_out(sim, room, event.job_id, graceful=True)  # right after its checkpoint
            else:
                room.pending.discard(event.job_id)
            _advance(sim, room)
        return
    disruptions.on_preempt(sim, event)


def metrics(sim: SimulationSurface) -> dict[str, Any]:
    """Waits of the large jobs (TP 8 and up) for every policy; the moves' tallies for policies that move."""
    large = sorted(
        j.first_start - j.trace.submit_s for j in sim.jobs.values() if j.spec.tp >= 8 and j.first_start is not None
    )
    out: dict[str, Any] = {"large_job_wait_s": {"p50": _pct(large, 0.5), "p95": _pct(large, 0.95), "n": len(large)}}
    room = sim.room
    if sim.policy.moves is not None:
        out["room_moves"] = {
            "plans": room.plans, "moves": room.moves, "stopped": room.stopped, "dropped": room.dropped,
            "overtaken": room.overtaken,
            "lost_work_gpu_hours": room.lost_gpu_s / 3600.0, "restart_gpu_hours": room.restart_gpu_s / 3600.0,
        }  # fmt: skip
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]

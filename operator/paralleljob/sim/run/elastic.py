"""Elastic jobs in the simulator: the same core functions the operator calls (``core/elastic.py``), carried
out on the engine's state.

With ``--elastic F`` every trace job of two or more replicas is elastic, with ``maxData`` its trace DP size
and ``minData = max(1, ceil(F * dp))``. It is admitted at the largest size from max down to min that places
now (``admission_size``), grows on every scheduling pass while free GPUs let it and no rigid job at equal or
higher priority waits (``plan_growth``), and resizes without losing work (checkpoint-free, as torchrun's
restart or TorchFT's per-step quorum), paying ``--resize-overhead`` seconds of restart with its GPUs held.

Throughput follows the step-time model: the trace duration is the job's work at its full size on the ideal
placement; at ``k`` of ``dp`` replicas, with communication cost ``C_k``, a step takes ``step_ms(C_k)`` and
does ``k / dp`` of a full step's samples, so the job runs ``(dp / k) * step_ms(C_k) / step_ms(C_ideal)``
times its trace duration (``slowdown``).

Taking growth replicas for a higher-priority job (``shrink_for``: highest replica first, lowest priority
first, before any whole gang) happens in both queue paths: the built-in queues' pass asks it for a rigid job
that does not fit (:func:`take_growth_replicas`, as the operator's FIFO admission does), the core queue
policies' pass returns it as a ``ShrinkReplicas`` decision (:func:`ranges_for_pass` gives it the ranges).
A replica that loses hardware with no room to repair it (or at the restart limit) is dropped while the job
keeps its minimum (``elastic_failure.drop_instead``, the operator's rule, :func:`drop_on_failure`); the kept
replicas' workers restart where they are, paying ``--restart-overhead``, with the work since the last
checkpoint lost as for any failure, but the drop is not one of the job's restarts (``counts_as_restart``). A
shrink pays ``--resize-overhead`` and loses nothing (the grace period of a preemption).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from paralleljob.core.cluster import Allocation
from paralleljob.core.elastic import (
    ElasticHolding,
    ElasticRange,
    Resize,
    growth_blocker,
    offers_growth_replicas,
    place_largest,
    plan_growth,
    resized,
    rigid_line,
    shrink_for,
)
from paralleljob.core.failure.elastic_failure import drop_instead
from paralleljob.core.failure.repair import FailureKind, RepairDecision
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Event as Step
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.evaluate import node_level_cost
from paralleljob.sim.run.core_queue import CoreQueue
from paralleljob.sim.run.jobs import SimJob
from paralleljob.sim.run.surface import SimulationSurface


def elastic_range(spec: JobSpec, fraction: float) -> ElasticRange | None:
    if fraction <= 0 or spec.dp < 2:
        return None
    return ElasticRange(max(1, math.ceil(fraction * spec.dp)), spec.dp, spec.dp)


def admit(sim: SimulationSurface, job: SimJob, gpu_room: int | None = None) -> Placement:
    """The placement at the largest size that fits within ``gpu_room`` GPUs of its queue (None: no cap), by
    the core's ``place_largest`` as the operator's FIFO path asks it; :class:`PlacementInfeasible` when min
    does not fit."""
    assert job.elastic is not None and job.full_spec is not None
    placement, _ = place_largest(sim.state, sim.placer, job.full_spec, job.elastic, sim.model, gpu_room)
    job.spec = resized(job.full_spec, placement.dp)
    return placement


def slowdown(sim: SimulationSurface, job: SimJob) -> float:
    """Wall time per trace second at the job's current size and cost (see the module docstring)."""
    assert job.full_spec is not None
    full = job.full_spec
    return full.dp / job.spec.dp * sim.steptime.slowdown(full, job.comm_ms, sim.ideal.comm_ms(full))


def grow_pass(sim: SimulationSurface) -> None:
    """Grow every running elastic job below max that free GPUs and the rigid waiting jobs allow (the core's
    ``plan_growth`` decides, held back by ``growth_blocker`` over the waiting rigid jobs, as in the operator).
    The engine calls it before the pass's admissions, as the operator's pass grows a job before it admits."""
    if not isinstance(sim.placer, Placer):
        return  # the baselines place whole jobs only
    now = sim.clock.now()
    candidates = sim.queue.candidates(now)
    waiting = rigid_line((w.priority, w.job_id) for w in candidates if sim.jobs[w.job_id].elastic is None)
    for job_id in sorted(sim.running, key=lambda j: sim.jobs[j].order):
        job = sim.jobs[job_id]
        if job.elastic is None or job.phase is not Phase.RUNNING:
            continue
        groups = sim.state.allocations[job_id].groups
        growth = plan_growth(
            sim.state, sim.placer, job.spec, groups, job.elastic, sim.model, sim.steptime,
            rigid_waiting=growth_blocker(waiting, job.spec.priority),
        )  # fmt: skip
        if growth.resize is None:
            continue
        apply_resize(sim, job, growth.resize)
        job.grows += 1


def apply_resize(sim: SimulationSurface, job: SimJob, resize: Resize, planned: Allocation | None = None) -> None:
    """Run ``job`` at ``resize``'s size from now on: checkpoint-free (the kept replicas carry the state over),
    ``--resize-overhead`` seconds of restart with its GPUs held. ``planned``: the allocation it had when a
    core pass already rewrote the state (only the engine's tallies are left to move)."""
    now = sim.clock.now()
    if job.phase is Phase.RUNNING:
        job.interrupt(now, save_all=True)
    else:
        job.epoch += 1  # placed, not started: its pending START is for the old size
    if planned is None:
        sim.release(job.job_id)
        sim.allocate(Allocation(job.job_id, resize.groups, job.spec.memory_per_gpu_gb))
    else:
        sim.count_allocation(planned, -1)
        sim.count_allocation(sim.state.allocations[job.job_id], +1)
        sim.room_epoch += 1
    job.spec = resized(job.spec, resize.after)
    job.resizes += 1
    job.resized_at = now
    sim.placed(job, resize.groups, _cost(sim, job, resize.groups))
    sim.running.pop(job.job_id, None)
    sim.expected_end.pop(job.job_id, None)
    job.resize_gpu_s += sim.config.resize_overhead_s * job.num_gpus  # no failure: not goodput lost to one
    sim.begin(job, now + sim.config.resize_overhead_s)


def _holdings(sim: SimulationSurface) -> list[ElasticHolding]:
    """Running elastic jobs that may give growth replicas in this pass, by the operator's rule
    (``core.elastic.offers_growth_replicas``: running, not being preempted, not resized already at this
    instant; a trace job may always be preempted)."""
    out = []
    now = sim.clock.now()
    for job_id in sorted(sim.running):
        job = sim.jobs[job_id]
        offered = offers_growth_replicas(
            running=job.phase is Phase.RUNNING,
            being_preempted=job_id in sim.preempting,
            resized_this_pass=job.resized_at == now,
            preemptible=True,
        )
        if job.elastic is not None and offered:
            out.append(ElasticHolding(job.spec, sim.state.allocations[job_id].groups, job.elastic))
    return out


def take_growth_replicas(sim: SimulationSurface, job: SimJob) -> Placement | None:
    """The built-in queues' path: a rigid job that does not fit takes lower-priority growth replicas when that
    lets it place now (``shrink_for``, the operator's FIFO rule; the core pass asks for rigid jobs only); its
    placement, or None."""
    if not isinstance(sim.placer, Placer):
        return None
    holdings = _holdings(sim)
    if not holdings:
        return None
    shrink = shrink_for(sim.state, sim.placer, sim.model, job.spec, holdings)
    if shrink is None:
        return None
    for resize in shrink.resizes:
        victim = sim.jobs[resize.job_id]
        apply_resize(sim, victim, resize)
        victim.shrinks += 1
    return shrink.placement


def ranges_for_pass(sim: SimulationSurface, queue: CoreQueue) -> dict[str, ElasticRange]:
    """The core queue pass's ``elastic``: every waiting elastic job, and the running ones that may shrink."""
    ranges = {
        w.job_id: rng for w in queue.candidates(sim.clock.now()) if (rng := sim.jobs[w.job_id].elastic) is not None
    }
    if isinstance(sim.placer, Placer):
        ranges.update({h.job.job_id: h.rng for h in _holdings(sim)})
    return ranges


def drop_on_failure(
    sim: SimulationSurface, job: SimJob, held: Allocation, decision: RepairDecision, kind: FailureKind,
    broken_groups: tuple[int, ...],
) -> Resize | None:
    """Drop the broken replicas instead of ``decision`` (the operator's rule, ``drop_instead``); the drop, or
    None when ``decision`` stands. The caller restarts the kept replicas."""
    resize = drop_instead(
        sim.state, job.spec, held.groups, job.elastic, decision, kind is not FailureKind.WORKER, broken_groups
    )
    if resize is None:
        return None
    sim.allocate(Allocation(job.job_id, resize.groups, job.spec.memory_per_gpu_gb))
    job.spec = resized(job.spec, resize.after)
    job.resizes += 1
    job.resized_at = sim.clock.now()
    job.drops += 1  # not a restart (core.failure.elastic_failure.counts_as_restart), as in the operator
    job.step(Step.REPAIRED)
    sim.placed(job, resize.groups, _cost(sim, job, resize.groups))
    return resize


def _cost(sim: SimulationSurface, job: SimJob, groups: tuple[tuple[int, ...], ...]) -> float:
    nodes = [sim.topology.gpu_node[g[0]] for g in groups]
    return node_level_cost(sim.topology, job.spec, nodes, sim.model).total_ms


def metrics(jobs: Sequence[SimJob]) -> dict[str, Any]:
    """What elastic jobs did: resizes by kind (grows + shrinks + drops = resizes) and the GPU-hours held idle
    while growing or shrinking, which no failure caused (a drop's restart is a failure's, in goodput lost)."""
    return {
        "elastic_resizes": sum(j.resizes for j in jobs),
        "elastic_grows": sum(j.grows for j in jobs),
        "elastic_shrinks": sum(j.shrinks for j in jobs),
        "elastic_drops": sum(j.drops for j in jobs),
        "elastic_resize_gpu_hours": math.fsum(j.resize_gpu_s for j in jobs) / 3600.0,
    }

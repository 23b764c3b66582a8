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
times its trace duration (``slowdown``). Not modelled here (the operator does them): taking growth
replicas for a higher-priority job, and dropping a broken replica (a failed elastic job is repaired or
requeued as a rigid one at its current size).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from paralleljob.core.cluster import Allocation
from paralleljob.core.elastic import ElasticRange, admission_size, plan_growth, resized
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.evaluate import node_level_cost
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placement import Placement
from paralleljob.core.placer import Placer

if TYPE_CHECKING:
    from paralleljob.sim.run.engine import Simulation
    from paralleljob.sim.run.jobs import SimJob


def elastic_range(spec: JobSpec, fraction: float) -> ElasticRange | None:
    if fraction <= 0 or spec.dp < 2:
        return None
    return ElasticRange(max(1, math.ceil(fraction * spec.dp)), spec.dp, spec.dp)


def min_gpus(job: SimJob) -> int:
    if job.elastic is None or job.full_spec is None:
        return job.num_gpus
    return job.full_spec.tp * job.full_spec.pp * job.elastic.min


def admit(sim: Simulation, job: SimJob) -> Placement:
    """The placement at the largest size that fits; :class:`PlacementInfeasible` when min does not."""
    assert job.elastic is not None and job.full_spec is not None
    placement, reasons = admission_size(sim.state, sim.placer, job.full_spec, job.elastic, sim.model)
    if placement is None:
        raise PlacementInfeasible(job.job_id, list(reasons))
    job.spec = resized(job.full_spec, placement.dp)
    return placement


def slowdown(sim: Simulation, job: SimJob) -> float:
    """Wall time per trace second at the job's current size and cost (see the module docstring)."""
    assert job.full_spec is not None
    full = job.full_spec
    return full.dp / job.spec.dp * sim.steptime.slowdown(full, job.cost_ms, sim.ideal.total_ms(full))


def grow_pass(sim: Simulation) -> None:
    """Grow every running elastic job below max that free GPUs and the rigid waiting jobs allow."""
    if not isinstance(sim.placer, Placer):
        return  # the baselines place whole jobs only
    now = sim.clock.now()
    waiting = sorted(
        ((w.priority, w.job_id) for w in sim.queue.candidates(now) if sim.jobs[w.job_id].elastic is None),
        reverse=True,
    )
    for job_id in sorted(sim.running, key=lambda j: sim.jobs[j].order):
        job = sim.jobs[job_id]
        if job.elastic is None or job.phase is not Phase.RUNNING or job.spec.dp >= job.elastic.desired:
            continue
        free = sim.topology.num_gpus - sim.allocated_gpus - sim.gpus_down
        if free < job.spec.tp * job.spec.pp:
            return
        blocker = next((key for p, key in waiting if p >= job.spec.priority), "")
        groups = sim.state.allocations[job_id].groups
        growth = plan_growth(
            sim.state, sim.placer, job.spec, groups, job.elastic, sim.model, sim.steptime, rigid_waiting=blocker
        )
        if growth.resize is None:
            continue
        job.interrupt(now, save_all=True)  # checkpoint-free: the replicas carry the state over
        sim._release(job_id)
        sim._allocate(Allocation(job_id, growth.resize.groups, job.spec.memory_per_gpu_gb))
        job.spec = resized(job.spec, growth.resize.after)
        job.resizes += 1
        cost = _cost(sim, job, growth.resize.groups)
        sim._placed(job, growth.resize.groups, cost)
        sim.running.pop(job_id, None)
        sim.expected_end.pop(job_id, None)
        job.restart_gpu_s += sim.config.resize_overhead_s * job.num_gpus
        sim._begin(job, now + sim.config.resize_overhead_s)


def _cost(sim: Simulation, job: SimJob, groups: tuple[tuple[int, ...], ...]) -> float:
    nodes = [sim.topology.gpu_node[g[0]] for g in groups]
    return node_level_cost(sim.topology, job.spec, nodes, sim.model).total_ms

"""The discrete-event engine: replays trace jobs through the core placer, recovery and a queue policy.

One :class:`Simulation` owns a :class:`~paralleljob.core.cluster.ClusterState` and an injected
:class:`~paralleljob.sim.run.events.SimClock`; handlers are plain methods that mutate the state through the core
API only (allocate, release, set_health, recover), exactly as the operator does. Randomness comes from
seeded ``random.Random`` instances: one for failures, one per job for its shape, so a run is a function of
(trace, cluster, config). With ``check_invariants`` every event is followed by a conservation check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Event as Step
from paralleljob.core.placing.baselines import tp_groups_across_nodes
from paralleljob.core.reoptimize import placed_dear
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.timing.evaluate import nodes_common_level
from paralleljob.core.timing.ideal import IdealCosts
from paralleljob.core.timing.steptime import StepTimeModel
from paralleljob.core.timing.traffic import level_bytes_per_step
from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.failures import FailureConfig, FailureProcess
from paralleljob.sim.run import disruptions, elastic, passes, roommoves
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.core_queue import CoreQueue, make_core_queue
from paralleljob.sim.run.events import EventQueue, Kind, SimClock, SimEvent
from paralleljob.sim.run.jobs import SimJob
from paralleljob.sim.run.metrics import FailureTally, Series, failure_metrics, job_metrics, mean_fragmentation
from paralleljob.sim.run.policies import (
    FifoQueue,
    SimRunningJob,
    WaitingJob,
    placement_policy,
    queue_policy,
)
from paralleljob.sim.run.roombook import RoomBook
from paralleljob.sim.run.tenants import TenantBook
from paralleljob.sim.run.work import plan_for
from paralleljob.sim.workload.trace import TraceJob


def _spec(trace: TraceJob, config: SimConfig) -> JobSpec:
    try:
        return trace.spec(config.seed, config.memory_per_gpu_gb, config.params_per_shard)
    except InvalidRequest as exc:
        raise ValueError(f"trace job {trace.job_id}: {exc}") from None


class InvariantViolated(AssertionError):
    """GPUs were created or lost: allocated + free + unhealthy != total, or the books disagree."""


@dataclass
class SimResult:
    policy: str
    metrics: dict[str, Any]
    series: Series
    jobs: list[SimJob] = field(repr=False)


class Simulation:
    def __init__(
        self,
        topology: Topology,
        trace: Sequence[TraceJob],
        config: SimConfig,
        *,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.topology, self.config, self.progress = topology, config, progress
        self.state = ClusterState(topology)
        self.policy = placement_policy(config.policy)
        self.placer = self.policy.make_placer(self.state)
        strategy = self.policy.recovery or RecoveryStrategy.FULL  # a baseline re-places the whole job
        self.failure_policy = replace(config.failure_policy, strategy=strategy)
        self.model = cost_model(config.cost_model)
        self.ideal = IdealCosts(topology, self.model)
        self.steptime = StepTimeModel(
            config.step_model, config.gpu_tflops, config.mfu, config.comm_overlap, config.comm_fraction
        )
        core = make_core_queue(config.queue, config.quotas)  # None unless it names a core queue policy
        self.queue: CoreQueue | FifoQueue = core if core is not None else queue_policy(config.queue)
        self.clock = SimClock()
        self.events = EventQueue()
        horizon = config.horizon_s
        self.trace = [t for t in trace if horizon is None or t.submit_s < horizon]
        if len({t.job_id for t in self.trace}) != len(self.trace):
            raise ValueError("trace job ids must be unique")
        self.specs = [_spec(t, config) for t in self.trace]
        self.jobs: dict[str, SimJob] = {}
        self.running: dict[str, SimRunningJob] = {}  # jobs in phase Running, for queue policies
        self.expected_end: dict[str, float] = {}  # when each running job finishes if nothing interrupts it
        self.preempting: dict[str, tuple[str, float]] = {}  # victim -> (the job it makes room for, deadline)
        self.dearer: set[str] = set()  # running jobs placed above their ideal cost (core.reoptimize.placed_dear)
        self.migrating: set[str] = set()  # a migration back is scheduled at their next checkpoint
        self.migrations = 0
        self.room_epoch = 0  # bumped whenever GPUs are freed or come back (room-making moves ask again then)
        self.asked_at: dict[str, float] = {}  # when a job was last re-priced for a move back
        self.node_allocated = [0] * topology.num_nodes
        self.allocated_gpus = 0
        self.tenants = TenantBook(config.quotas)
        self.gpus_down = 0
        self.down_token: dict[int, int] = {}
        self.unfinished = len(self.trace)
        self.tally = FailureTally()
        self.series = Series()
        self._next_arrival = 0
        self.next_rank = len(self.trace)  # queue ranks of jobs requeued at the back of the line
        self._schedule_pending = False
        self._last_time = 0.0
        self._allocated_gpu_s = 0.0
        self._unhealthy_gpu_s = 0.0
        self.outage_tokens = 0
        self._processed = 0
        span = horizon or max((t.submit_s + t.duration_s for t in self.trace), default=1.0)
        self.span = max(span, 1.0)
        self.sample_every = self.span / max(1, config.samples)
        self.failure_horizon = config.failure_horizon_s if config.failure_horizon_s is not None else self.span
        if config.horizon_s is not None:
            self.failure_horizon = min(self.failure_horizon, config.horizon_s)
        # The busy period, over which allocation is comparable between policies: from the first submit to
        # the last (the load is offered); the final drain, whose length depends on the policy, is excluded.
        self.busy_from = self.trace[0].submit_s if self.trace else 0.0
        self.busy_to = self.trace[-1].submit_s if self.trace else 0.0
        self._busy_gpu_s = 0.0
        self.room = RoomBook()  # the room-making moves' plan and tallies (roommoves; idle without policy.moves)
        self.failures = FailureProcess(
            FailureConfig(config.failure_rate, config.causes, config.gpu_repair_hours, config.node_repair_hours),
            topology.num_nodes,
            topology.node_gpu_count,
            config.seed,
        )

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self) -> SimResult:
        if self.trace:
            self.events.push(self.trace[0].submit_s, Kind.ARRIVAL)
        if self.failures.enabled:
            disruptions.push_failure(self, self.failures.next_after(0.0))
        for failure in self.config.scripted_failures:  # exact, so not cut at the failure horizon
            self.events.push(failure.time, Kind.FAILURE, payload=(failure, False))
        self.events.push(0.0, Kind.SAMPLE)
        if self.config.horizon_s is not None:
            self.events.push(self.config.horizon_s, Kind.END)
        handlers: dict[Kind, Callable[[SimEvent], None]] = {
            Kind.ARRIVAL: self._on_arrival,
            Kind.START: self._on_start,
            Kind.FINISH: self._on_finish,
            Kind.FAILURE: partial(disruptions.on_failure, self),
            Kind.REPAIR: partial(disruptions.on_repair, self),
            Kind.PREEMPT: partial(roommoves.on_preempt, self),  # a plan's moves, else disruptions'
            Kind.SCHEDULE: self._on_schedule,
            Kind.SAMPLE: self._on_sample,
        }
        while self.events:
            event = self.events.pop()
            self._advance(event.time)
            if event.kind is Kind.END:
                break
            handlers[event.kind](event)
            self._processed += 1
            if self.config.check_invariants:
                self.check_invariants()
            if self.progress is not None and self._processed % 2000 == 0:
                self.progress(self.clock.now())
            if self.unfinished == 0:
                break
        self._sample()
        return self._result()

    def _advance(self, to: float) -> None:
        elapsed = to - self._last_time
        if elapsed > 0:
            busy = min(to, self.busy_to) - max(self._last_time, self.busy_from)
            if busy > 0:
                self._busy_gpu_s += self.allocated_gpus * busy
            self._allocated_gpu_s += self.allocated_gpus * elapsed
            self._unhealthy_gpu_s += self.gpus_down * elapsed
            self._last_time = to
        self.clock.advance(to)

    def request_schedule(self) -> None:
        if not self._schedule_pending:
            self._schedule_pending = True
            self.events.push(self.clock.now(), Kind.SCHEDULE)

    # ---- jobs arrive, start, finish ---------------------------------------------------------------
    def _on_arrival(self, event: SimEvent) -> None:
        order = self._next_arrival
        trace = self.trace[order]
        self._next_arrival += 1
        if self._next_arrival < len(self.trace):
            self.events.push(self.trace[self._next_arrival].submit_s, Kind.ARRIVAL)
        job = SimJob(trace, self.specs[order], order)
        job.elastic = elastic.elastic_range(job.spec, self.config.elastic)
        if job.elastic is not None:
            job.full_spec = job.spec
        self.jobs[trace.job_id] = job
        job.step(Step.ACCEPTED)
        self.queue.add(self.waiting_job(job), self.clock.now())
        self.request_schedule()

    def waiting_job(self, job: SimJob) -> WaitingJob:
        t = job.trace
        queued = t.submit_s if job.queued_s is None else job.queued_s
        return WaitingJob(job.job_id, job.order, queued, job.num_gpus, t.tenant, job.spec.priority)

    def _on_schedule(self, event: SimEvent) -> None:
        self._schedule_pending = False
        passes.scheduling_pass(self)  # its steps in the operator's order (core.admit.passorder)

    def placed(self, job: SimJob, groups: tuple[tuple[int, ...], ...], cost_ms: float) -> None:
        if placed_dear(cost_ms, self.ideal.total_ms(job.spec)):  # a move-back candidate (core.reoptimize)
            self.dearer.add(job.job_id)
        else:
            self.dearer.discard(job.job_id)
        job.placements += 1
        if job.num_gpus > 1:
            job.bytes_per_step = level_bytes_per_step(self.topology, job.spec, groups, self.model)
            job.steps_per_work_s = self.steptime.steps(job.spec, 1.0, self.ideal.comm_ms(job.spec))
        job.tp_groups_split += tp_groups_across_nodes(self.state, groups)
        job.cost_ms = cost_ms
        # The step time rests on the calibrated collective model, not on the price the placer minimised.
        job.comm_ms = self.ideal.timing.step(job.spec, groups, self.model).total_ms if job.num_gpus > 1 else 0.0
        if job.first_cost_ms is None:
            gpu_node = self.topology.gpu_node
            job.first_span_level = nodes_common_level(self.topology, {gpu_node[g] for grp in groups for g in grp})
            job.first_cost_ms = cost_ms
            job.first_slowdown = self._slowdown(job)

    def _slowdown(self, job: SimJob) -> float:
        if job.elastic is not None:
            return elastic.slowdown(self, job)
        return self.steptime.slowdown(job.spec, job.comm_ms, self.ideal.comm_ms(job.spec))

    def _on_start(self, event: SimEvent) -> None:
        job = self.jobs[event.job_id]
        if event.payload != (job.epoch,):
            return  # the job was interrupted between placement and start
        job.step(Step.BOUND)
        self.begin(job, self.clock.now())

    def begin(self, job: SimJob, start: float) -> None:
        """Run (or resume) ``job`` on its current allocation from ``start``."""
        cfg = self.config
        gpu_node = self.topology.gpu_node
        nodes = len({gpu_node[g] for g in self.state.allocations[job.job_id].gpus})
        plan = plan_for(nodes, cfg.failure_rate, cfg.checkpoint_cost_s, cfg.checkpoint_interval_s)
        finish = job.begin_segment(start, 1.0 / self._slowdown(job), plan)
        if job.first_start is None:
            job.first_start = start
        t = job.trace
        self.running[job.job_id] = SimRunningJob(job.job_id, job.num_gpus, t.tenant, job.spec.priority, start)
        self.expected_end[job.job_id] = finish
        self.events.push(finish, Kind.FINISH, job.job_id, (job.epoch,))

    def _on_finish(self, event: SimEvent) -> None:
        job = self.jobs[event.job_id]
        if event.payload != (job.epoch,):
            return
        self.dearer.discard(job.job_id)
        self.release(job.job_id)
        self.running.pop(job.job_id, None)
        self.expected_end.pop(job.job_id, None)
        job.step(Step.COMPLETED)
        job.finished = self.clock.now()
        job.charge_traffic(job.work_left)
        job.work_left = 0.0
        self.unfinished -= 1
        self.request_schedule()

    def reject_done(self, job: SimJob, reason: str) -> None:
        job.rejected_reason = reason or "rejected"
        self.unfinished -= 1

    # ---- allocation bookkeeping -------------------------------------------------------------------
    def allocate(self, allocation: Allocation) -> None:
        self.state.allocate(allocation)
        self.count_allocation(allocation, +1)

    def release(self, job_id: str) -> Allocation | None:
        allocation = self.state.release(job_id)
        if allocation is not None:
            self.count_allocation(allocation, -1)
            self.room_epoch += 1
        return allocation

    def count_allocation(self, allocation: Allocation, sign: int) -> None:
        gpu_node = self.topology.gpu_node
        for gpu in allocation.gpus:
            self.node_allocated[gpu_node[gpu]] += sign
        self.allocated_gpus += sign * len(allocation.gpus)
        self.tenants.add(self.jobs[allocation.job_id].trace.tenant, sign * len(allocation.gpus), self.clock.now())

    # ---- observation ------------------------------------------------------------------------------
    def _on_sample(self, event: SimEvent) -> None:
        self._sample()
        # Nothing else is due: whoever still waits would wait for ever (a job the empty cluster cannot place,
        # not "never" by the core's rule: the operator would keep it waiting too). The run ends there.
        if self.events:
            self.events.push(self.clock.now() + self.sample_every, Kind.SAMPLE)

    def _sample(self) -> None:
        free = self.state.node_free
        stranded = sum(f for f, a in zip(free, self.node_allocated, strict=True) if a and f)
        total_free = sum(free)
        series = self.series
        if series.time_s and series.time_s[-1] == self.clock.now():
            return
        series.time_s.append(self.clock.now())
        series.allocation.append(self.allocated_gpus / self.topology.num_gpus)
        # Stranded GPUs as a share of the cluster: a share of the *free* GPUs jumps to 100% whenever the last
        # whole free node is taken, however few GPUs that is.
        series.fragmentation.append(stranded / self.topology.num_gpus)
        series.free.append(total_free / self.topology.num_gpus)
        series.queued.append(len(self.queue))
        series.running.append(len(self.running))

    def check_invariants(self) -> None:
        counts = self.state.counts()
        counts["free"] += roommoves.held_free(self)  # free, but held for a waiting job: closed to the rest
        if counts["allocated"] + counts["free"] + counts["unhealthy"] != counts["total"]:
            raise InvariantViolated(f"GPUs not conserved at t={self.clock.now()}: {counts}")
        if counts["allocated"] != self.allocated_gpus or sum(self.node_allocated) != self.allocated_gpus:
            raise InvariantViolated(f"allocation books disagree at t={self.clock.now()}: {counts}")
        if counts["unhealthy"] != self.gpus_down:
            raise InvariantViolated(f"{counts['unhealthy']} GPUs unhealthy, {self.gpus_down} recorded down")
        over = self.tenants.over_quota()
        if over:
            raise InvariantViolated(f"at t={self.clock.now()}: " + "; ".join(over))

    def _span_levels(self, jobs: list[SimJob]) -> dict[str, int]:
        """Multi-GPU jobs by the lowest level that holds their first placement: how many rings and pipelines
        cross a rack or a spine."""
        names = [level.name for level in self.topology.levels]
        counts = dict.fromkeys(names, 0)
        for job in jobs:
            if job.num_gpus > 1 and job.first_cost_ms is not None:
                counts[names[job.first_span_level]] += 1
        return counts

    def _bytes_by_level(self, jobs: list[SimJob]) -> dict[str, float]:
        """Bytes every job's steps moved over each topology level, summed over the run (segments that ended:
        finished, interrupted or preempted)."""
        names = [level.name for level in self.topology.levels]
        return {name: math.fsum(j.level_bytes[i] for j in jobs if j.level_bytes) for i, name in enumerate(names)}

    def _busy_allocation(self) -> float | None:
        span = self.busy_to - self.busy_from
        return self._busy_gpu_s / (self.topology.num_gpus * span) if span > 0 else None

    def _result(self) -> SimResult:
        jobs = list(self.jobs.values())
        elapsed = self.clock.now()
        metrics = {
            "policy": self.policy.name,
            "policy_description": self.policy.description,
            "queue": self.queue.name,
            "simulated_days": elapsed / 86_400.0,
            "events": self._processed,
            **job_metrics(jobs, self.topology.num_gpus, elapsed, self._allocated_gpu_s, self._unhealthy_gpu_s),
            "gpu_allocation_busy_period": self._busy_allocation(),
            "busy_period_s": max(0.0, self.busy_to - self.busy_from),
            "fragmentation_mean": mean_fragmentation(self.series),
            "multi_gpu_jobs_by_span_level": self._span_levels(jobs),
            "bytes_by_level": (by_level := self._bytes_by_level(jobs)),
            "bytes_above_node": math.fsum(list(by_level.values())[1:]),
            "failures": failure_metrics(self.tally),
            **roommoves.metrics(self),
            **(elastic.metrics(jobs) if self.config.elastic > 0 else {}),
            **({
                "migrations_back": self.migrations,
                "migrations_back_gpu_hours": math.fsum(j.move_gpu_s for j in jobs) / 3600.0,
            } if self.policy.reoptimize else {}),
        }
        metrics["tenants"] = self.tenants.metrics(jobs, self.topology.num_gpus, elapsed)
        if isinstance(self.queue, CoreQueue):
            metrics["preemptions_cancelled"] = self.tally.preemptions_cancelled
            if self.queue.jain:
                metrics["fairness_jain_mean"] = math.fsum(self.queue.jain) / len(self.queue.jain)
        return SimResult(self.policy.name, metrics, self.series, jobs)

"""A job inside the simulator: its phase (driven by the core's lifecycle table), its work and its history.

The simulator never sets a phase by hand: every change goes through
:func:`paralleljob.core.lifecycle.transition`, so a run that tries an illegal step fails loudly instead of
inventing states the operator would never reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paralleljob.core.elastic import ElasticRange
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Event, Phase, transition
from paralleljob.sim.run.work import NO_CHECKPOINTS, CheckpointPlan, progress, wall_time_for
from paralleljob.sim.workload.trace import TraceJob


@dataclass
class SimJob:
    trace: TraceJob
    spec: JobSpec
    order: int  # rank in the queue: the arrival rank, a new one when a failure requeues it at the back
    phase: Phase = Phase.PENDING
    work_left: float = 0.0  # trace seconds not yet saved by a checkpoint
    epoch: int = 0  # bumped on every interruption, so stale START / FINISH events are ignored
    # the current run segment
    segment_start: float = 0.0  # when computing (re)starts; after a restart overhead it lies in the future
    rate: float = 1.0  # trace seconds of work per wall second (1 / slowdown)
    plan: CheckpointPlan = field(default_factory=lambda: CheckpointPlan(NO_CHECKPOINTS, 0.0))
    cost_ms: float = 0.0  # the cost model's price of the current placement (what repairs and moves compare)
    comm_ms: float = 0.0  # the calibrated time of its communication per step (what the step time adds)
    # history, for the metrics
    first_start: float | None = None
    finished: float | None = None
    first_cost_ms: float | None = None
    first_slowdown: float | None = None
    first_span_level: int = 0  # lowest topology level holding all of the first placement (0: one node)
    placements: int = 0
    tp_groups_split: int = 0  # over every placement of this job
    restarts: int = 0
    preemptions: int = 0
    requeues: int = 0
    lost_work_s: float = 0.0  # trace seconds of work thrown away by failures
    lost_gpu_s: float = 0.0  # GPU-seconds spent computing work that was then lost
    restart_gpu_s: float = 0.0  # GPU-seconds held while restarting after a failure
    move_gpu_s: float = 0.0  # GPU-seconds held while restarting after a move back (no failure: not goodput lost)
    queued_s: float | None = None  # when it last re-entered the queue at the back; None: its submit time
    rejected_reason: str = ""
    fits_somewhere: bool = False  # it fits the empty cluster (passes.refuse_never_fitting): not asked again
    gave_up: str = ""  # why the failure policy gave the job up (core.failure.repair), else empty
    # cross-level traffic: bytes per step of the current placement per topology level, training steps per
    # trace second of work (the step-time model's calibration), and the bytes moved so far per level
    bytes_per_step: tuple[float, ...] = ()
    steps_per_work_s: float = 0.0
    level_bytes: list[float] = field(default_factory=list)
    # elastic jobs (sim/run/elastic.py): the range, the trace's full-size spec (``spec`` is the current size)
    elastic: ElasticRange | None = None
    full_spec: JobSpec | None = None
    resizes: int = 0  # grows + shrinks + drops
    grows: int = 0
    shrinks: int = 0  # growth replicas taken for a higher-priority job
    drops: int = 0  # broken replicas dropped with no room to repair (after a failure)
    resize_gpu_s: float = 0.0  # GPU-seconds held while growing or shrinking (no failure: not goodput lost)
    resized_at: float | None = None  # when it last grew, shrank or dropped: not offered for a shrink then

    def __post_init__(self) -> None:
        self.work_left = self.trace.duration_s

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def num_gpus(self) -> int:
        return self.spec.num_gpus

    @property
    def ran_before(self) -> bool:
        """It started once (the operator's ``status.startTime``): a "never fits" then waits for repairs."""
        return self.first_start is not None

    def step(self, *events: Event) -> None:
        for event in events:
            self.phase = transition(self.phase, event)

    def charge_traffic(self, work_s: float) -> None:
        """Count the bytes of ``work_s`` trace seconds computed on the current placement (lost work too:
        its steps crossed the links all the same)."""
        if not self.bytes_per_step or work_s <= 0:
            return
        if not self.level_bytes:
            self.level_bytes = [0.0] * len(self.bytes_per_step)
        steps = work_s * self.steps_per_work_s
        for level, per_step in enumerate(self.bytes_per_step):
            self.level_bytes[level] += per_step * steps

    def begin_segment(self, start: float, rate: float, plan: CheckpointPlan) -> float:
        """Start computing at ``start``; returns the wall time the job will finish if nothing interrupts."""
        self.segment_start, self.rate, self.plan = start, rate, plan
        return start + wall_time_for(self.work_left, rate, plan)

    def interrupt(self, now: float, *, save_all: bool) -> float:
        """Stop the segment at ``now``. ``save_all``: a graceful stop (preemption) checkpoints everything.
        Returns the work lost (trace seconds)."""
        self.epoch += 1
        done, saved = progress(now - self.segment_start, self.rate, self.plan)
        if save_all:
            saved = done
        self.charge_traffic(done)
        self.work_left = max(0.0, self.work_left - saved)
        lost = done - saved
        self.lost_work_s += lost
        self.lost_gpu_s += lost / self.rate * self.num_gpus
        return lost

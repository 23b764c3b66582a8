"""What the engine's handler modules may read and change of a running simulation: its public surface.

``disruptions`` (failures, repairs, preemption, moving back), ``elastic`` (growth, shrinks, drops) and
``roommoves`` (moves that free room) are module functions the engine calls with itself; they are typed against
this protocol, not against :class:`~paralleljob.sim.run.engine.Simulation`, so they name everything they touch
and never import the engine that imports them. The engine satisfies it (mypy checks each call).
"""

from __future__ import annotations

from typing import Protocol

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.failure.repair import FailurePolicy
from paralleljob.core.placing.placement import PlacerLike
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.ideal import IdealCosts
from paralleljob.core.timing.steptime import StepTimeModel
from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.failures import FailureProcess
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.core_queue import CoreQueue
from paralleljob.sim.run.events import EventQueue, SimClock
from paralleljob.sim.run.jobs import SimJob
from paralleljob.sim.run.metrics import FailureTally
from paralleljob.sim.run.policies import FifoQueue, PlacementPolicy, SimRunningJob, WaitingJob
from paralleljob.sim.run.roombook import RoomBook
from paralleljob.sim.run.tenants import TenantBook


class SimulationSurface(Protocol):
    # what the run is: its cluster, policies, models and clock
    topology: Topology
    config: SimConfig
    state: ClusterState
    policy: PlacementPolicy
    placer: PlacerLike
    failure_policy: FailurePolicy
    model: CostModel
    ideal: IdealCosts
    steptime: StepTimeModel
    queue: CoreQueue | FifoQueue
    clock: SimClock
    events: EventQueue
    failures: FailureProcess
    failure_horizon: float
    # its jobs and their books
    jobs: dict[str, SimJob]
    running: dict[str, SimRunningJob]
    expected_end: dict[str, float]
    preempting: dict[str, tuple[str, float]]  # victim whose preemption is under way -> (for whom, its deadline)
    dearer: set[str]  # running jobs placed above their ideal cost
    migrating: set[str]  # a move back is scheduled at their next checkpoint
    migrations: int
    room_epoch: int  # bumped whenever GPUs are freed or come back
    asked_at: dict[str, float]  # when a job was last re-priced for a move back (core.reoptimize.reprice_now)
    next_rank: int  # the next queue rank at the back of the line
    unfinished: int
    room: RoomBook
    tenants: TenantBook  # the tenants' quotas and the GPUs each holds
    # hardware down, and the tallies of failures
    gpus_down: int
    down_token: dict[int, int]  # GPU -> the outage that took it down (a repair ends only its own)
    outage_tokens: int
    tally: FailureTally

    def request_schedule(self) -> None:
        """A scheduling pass at this instant (one per instant, however often asked)."""
        ...

    def waiting_job(self, job: SimJob) -> WaitingJob:
        """``job`` as its queue keeps it (arrival rank, queue time, tenant, priority)."""
        ...

    def placed(self, job: SimJob, groups: tuple[tuple[int, ...], ...], cost_ms: float) -> None:
        """Record that ``job`` now runs on ``groups`` at ``cost_ms`` (its step time, traffic and history)."""
        ...

    def begin(self, job: SimJob, start: float) -> None:
        """Run (or resume) ``job`` on its current allocation from ``start``."""
        ...

    def reject_done(self, job: SimJob, reason: str) -> None:
        """``job`` was rejected (its phase already says so): it is done, with ``reason``."""
        ...

    def allocate(self, allocation: Allocation) -> None:
        """Allocate in the state and count it in the books."""
        ...

    def release(self, job_id: str) -> Allocation | None:
        """Release from the state and the books (the room epoch moves on)."""
        ...

    def count_allocation(self, allocation: Allocation, sign: int) -> None:
        """Count an allocation the state already holds (+1) or gave up (-1) in the books."""
        ...

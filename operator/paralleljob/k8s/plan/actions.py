"""What the decisions ask the executor to do, as values. The executor writes the status first, then
deletes, creates and binds pods; it never decides anything itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from paralleljob.core.admit.queueing import QueueBook
from paralleljob.core.failure.repair import FailureAction
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.render.claims import DeviceClaim
from paralleljob.k8s.plan.failure.backoff import Backoff
from paralleljob.k8s.plan.groups.groupclaims import ClaimReserve
from paralleljob.k8s.plan.nodenotes import NodeEvent
from paralleljob.k8s.plan.status import StatusDraft

T = TypeVar("T")

# The phases of a job that holds GPUs. A tuple, not a set: ``in`` then compares identities, where a set hashes
# the member (Enum's __hash__ is Python code) -- it is asked for every job of every pass.
ACTIVE = (Phase.PLACING, Phase.RUNNING, Phase.RECOVERING)


@dataclass(frozen=True, slots=True)
class PodDelete:
    namespace: str
    name: str
    uid: str
    force: bool  # grace period 0: the node is gone or down, nobody will confirm a graceful stop
    why: str


@dataclass(frozen=True, slots=True)
class PodCreate:
    manifest: dict[str, Any]
    node: str  # where to bind it right after it is created
    claim: DeviceClaim | None = None  # on a DRA node: allocated for the pod before it is bound


@dataclass(frozen=True, slots=True)
class PodBind:
    namespace: str
    name: str
    uid: str
    node: str
    claim: DeviceClaim | None = None


@dataclass(frozen=True, slots=True)
class PodAnnotate:
    """Merge annotations into one of the job's pods (the checkpoint-now signal of a preemption)."""

    namespace: str
    name: str
    uid: str
    annotations: dict[str, str]


@dataclass(frozen=True, slots=True)
class JobDelete:
    """Delete the ParallelJob itself (its TTL after finishing ran out, plan/ttl.py). ``uid`` is the
    precondition: a job re-created under the same name meanwhile is another job and is never deleted."""

    namespace: str
    name: str
    uid: str
    why: str


@dataclass(frozen=True, slots=True)
class DomainDelete:
    """Delete one of ``job``'s ComputeDomains, of a clique its placement no longer uses
    (plan/pods/computedomains.py). ``uid`` is the precondition: one re-created under that name is left alone."""

    job: JobObject
    namespace: str
    name: str
    uid: str
    why: str


@dataclass(frozen=True, slots=True)
class EventNote:
    event_type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(slots=True)
class JobActions:
    """One job's decisions. The lists start as the shared empty tuple and become lists when something is
    added (:func:`added`): a pass deciding a line of thousands of waiting jobs gives almost all of them none,
    and seven empty lists each were a quarter of what such a pass allocated per job."""

    job: JobObject
    draft: StatusDraft
    events: Sequence[EventNote] = ()
    deletes: Sequence[PodDelete] = ()
    creates: Sequence[PodCreate] = ()
    binds: Sequence[PodBind] = ()
    annotates: Sequence[PodAnnotate] = ()
    service: dict[str, Any] | None = None  # the headless Service to make sure of
    # ComputeDomains a whole-tray job's new pods need (one per clique; created before the pods, once)
    compute_domains: Sequence[dict[str, Any]] = ()
    membership: dict[str, Any] | None = None  # an elastic job's replicas ConfigMap to write (it changed)
    reserves: Sequence[ClaimReserve] = ()  # a PodGroup's shared claims, before its binds
    rendezvous: dict[str, Any] | None = None  # and its rendezvous Service, pointed at the current host
    # For metrics: set when this pass placed, repaired or failed the job.
    placed_cost: dict[str, float] | None = None
    recovery_started: bool = False
    recovery_done: bool = False
    gang_bound: bool = False
    failure_action: FailureAction | None = None
    migrated: bool = False
    # a running job the core re-prices for a move back now and then (core.reoptimize.move_back_candidate):
    # never left out of a pass as steady (plan/admission/waiting_remember.py)
    move_back_candidate: bool = False
    repriced: int | None = None  # re-priced for a move back in this pass, at this placement epoch (repriced_at)
    room_moved_gpu_s: float | None = None  # moved to free room for another job: the work it lost
    room_plan_made_s: float | None = None  # admitted into room that moves freed: when its plan was made
    wake_at: float | None = None  # epoch seconds: decide again then even if nothing changes (a group's timeout)
    delete_job: JobDelete | None = None  # the ParallelJob itself goes (after its pods' writes, if any)

    @property
    def writes_status(self) -> bool:
        return self.draft.changed()

    @property
    def gives_gpus_up(self) -> bool:
        """Its status write takes a job that holds GPUs out of the active phases (finished, failed, requeued):
        while that write is in flight the job is *releasing*, its recorded placement claiming no GPUs, which
        this pass may have given to others already (``decide.claims_of``)."""
        return self.writes_status and self.draft.phase not in ACTIVE and self.job.phase in ACTIVE

    @property
    def only_records_waiting(self) -> bool:
        """Its chain writes nothing but the status (and Events) of a job that holds no GPUs and is given none:
        a waiting job's reason, a new job's first "Queued". The runtime sends such writes after any other
        (``runtime/lanes.py``): they put no GPU to work and free none."""
        return self.draft.phase in (Phase.PENDING, Phase.QUEUED) and not (
            self.deletes
            or self.creates
            or self.binds
            or self.annotates
            or self.service is not None
            or self.compute_domains
            or self.membership is not None
            or self.reserves
            or self.rendezvous is not None
            or self.delete_job is not None
        )

    @property
    def has_work(self) -> bool:
        """Whether carrying these decisions out touches the API at all (the runtime starts a chain for them,
        and the job is busy until it ends)."""
        return bool(
            self.writes_status
            or self.deletes
            or self.creates
            or self.binds
            or self.events
            or self.annotates
            or self.membership is not None
            or self.reserves
            or self.rendezvous is not None
            or self.delete_job is not None
        )

    def note(self, event_type: str, reason: str, message: str) -> None:
        self.events = added(self.events, EventNote(event_type, reason, message))


def added(items: Sequence[T], item: T) -> list[T]:
    """``items`` with ``item`` at the end: appended in place once it is a list, a new list the first time."""
    out = items if isinstance(items, list) else list(items)
    out.append(item)
    return out


@dataclass
class Plan:
    jobs: list[JobActions] = field(default_factory=list)
    # Jobs left alone this pass because their previous decisions are still being carried out, as observed
    # (nothing to execute). They still exist: the gauges and queue statuses count them (``seen``).
    busy: list[JobActions] = field(default_factory=list)
    orphans: list[PodDelete] = field(default_factory=list)  # workers whose ParallelJob is gone
    domain_deletes: list[DomainDelete] = field(default_factory=list)  # ComputeDomains of cliques left behind
    scheduling_seconds: list[float] = field(default_factory=list)
    queue_lengths: dict[str, int] = field(default_factory=dict)
    # Queued jobs left out of this pass because nothing that could admit them changed (plan/admission/waiting.py):
    # queue -> how many; they are counted in the gauges and queue statuses all the same.
    quiet_waiting: dict[str, int] = field(default_factory=dict)
    # queue -> when its longest-waiting left-out job entered it (status.queuedAt): the queue-wait gauge's too
    quiet_oldest: dict[str, str] = field(default_factory=dict)
    # queue -> new waiting jobs decided alone, behind the head the memo remembers holding their line
    behind_heads: dict[str, int] = field(default_factory=dict)
    # New jobs not decided because their first status write could not start this pass (behind a blocked head,
    # beyond Observed.background_room): queue -> how many; counted as Pending, and as waiting in their queue
    skipped_pending: dict[str, int] = field(default_factory=dict)
    # Finished jobs left out because neither they nor their pods changed (plan/admission/waiting.py), by phase
    quiet_finished: dict[str, int] = field(default_factory=dict)
    quiet_wake_at: float | None = None  # the earliest TTL deadline among those finished jobs
    warnings: list[str] = field(default_factory=list)
    fairness: float | None = None  # Jain's index from the queueing pass (None: strict FIFO computes its own)
    queue_book: QueueBook | None = None  # the queues' usage after the pass (queue statuses and gauges read it)
    wake_after: float | None = None  # seconds until the next deadline (a preemption's, a wait's): pass again then
    adopt: list[dict[str, Any]] = field(default_factory=list)  # ParallelJobs to create for pod groups
    # Kubernetes PodGroups whose pods ask for us but which are not adopted, and why (their condition says it)
    refused_groups: dict[str, str] = field(default_factory=dict)
    queue_statuses: dict[str, dict[str, float]] = field(default_factory=dict)  # queues whose status is stale
    backoff: Backoff = field(default_factory=Backoff)  # the waits the next pass starts from
    node_events: list[NodeEvent] = field(default_factory=list)  # Warning events to post on nodes
    node_warnings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # what has been reported, by node

    def waiting_left_out(self) -> dict[str, int]:
        """Queue -> the waiting jobs this pass did not decide (quiet lines' Queued jobs, skipped new ones)."""
        out = dict(self.quiet_waiting)
        for queue, count in self.skipped_pending.items():
            out[queue] = out.get(queue, 0) + count
        return out

    def seen(self) -> list[JobActions]:
        """Every job of this pass, decided or busy: what a count of jobs by phase or queue must cover."""
        return [*self.jobs, *self.busy]

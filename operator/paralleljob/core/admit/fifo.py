"""Strict FIFO per queue, the default admission (like Kueue's StrictFIFO), as one pure pass.

Each queue is a line: higher priority first, then the time the job (re)entered the queue, then a tie-break
the shell chooses (the object key, an arrival rank). Queues never block each other. Each job is put through
the admission checks in one order, and the first that refuses gives its typed reason:

1. its entry gate (``gates.entry_gate``: queue refuses its namespace, backing off, preemption under way,
   no GPU nodes), evaluated by the shell from its objects and handed in with the job;
2. its line is blocked by a head that does not fit (``strict`` only): ``WaitReason.WAITING``;
3. its queue's cap (``gates.quota_refusal``): ``WaitReason.QUEUE_FULL``;
4. room now: first a count (it needs no more GPUs than are free, so a long line behind a full cluster costs
   no placer call per job), then the placer: ``WaitReason.UNSCHEDULABLE``.

A job refused by a blocking check becomes the head of its line, and with ``strict`` every later job of its
line waits behind it, so a large job is never starved by a stream of small ones. A placer verdict of
"never" fails the job (``Wait.permanent``) and blocks nothing, unless the job ran before: then the missing
room is taken for broken hardware that will be repaired, and it waits at the head like any other.

An elastic job (``FifoJob.min_gpus`` set) is checked against its cap and the free count at its minimum, and
placed by ``FifoHooks.place_elastic`` at the largest size that fits (capped by its queue's room); a rigid job
that does not fit may take lower-priority jobs' growth replicas through ``FifoHooks.take_growth`` before it
waits (``core/elastic.py`` decides both; the hooks let the shell carry out the shrinks it implies).

The operator (``k8s/plan/admission/fifo_admission.py``) and the simulator (``sim/run/engine.py``) both call
:func:`schedule_fifo` with the lines to decide (:class:`FifoLines`); it allocates every admission in the
state of its ``PlaceOn`` (``core/admit/admission.py``) and returns the decisions as values, in the order taken.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.admit.admission import Admit, PlaceOn, Wait
from paralleljob.core.admit.gates import Gate, WaitReason, fails_for_good, quota_refusal
from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.elastic import takes_growth_replicas
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.failure.repair import FailureKind
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement


class RequeueOrder(enum.StrEnum):
    """Where a job requeued after its hardware broke (or was drained) stands: a queue's ``requeueOrder``."""

    # At its place (its old queue time), as a preempted job: it did nothing wrong, and users of every batch
    # system expect it not to lose its turn. Under strict FIFO it may head its line again before room returns.
    KEEP_PLACE = "KeepPlace"
    # At the back (queue time now), as Kueue requeues an evicted workload: a job that has just failed to fit
    # does not hold its line (docs/simulator.md, "Failures against best-fit", measured this order).
    BACK = "Back"


# A ParallelJobQueue's requeueOrder when it names none (and for a job with no queue object): the operator's
# and the simulator's default alike.
DEFAULT_REQUEUE_ORDER = RequeueOrder.KEEP_PLACE


def keeps_place(order: RequeueOrder, kind: FailureKind) -> bool:
    """Whether a job requeued with no room after ``kind`` keeps its queue time (else it is stamped now, the
    back of the line): a drain is maintenance and always keeps it, as a preemption does; a crashed worker is
    the job's own failure and always goes to the back; for broken hardware the queue's ``order`` says."""
    return kind.maintenance or (kind.hardware and order is RequeueOrder.KEEP_PLACE)


@dataclass(frozen=True, slots=True)
class FifoPolicy:
    """The strict FIFO queue policy. ``strict`` False is best effort: a head that does not fit is skipped
    and the jobs behind it are tried (they may starve it)."""

    strict: bool = True
    # Word a count refusal by the TP groups the free GPUs hold, each inside one node (``room_refusal``); False
    # where a TP group may also span the trays of an NVLink clique, which a per-node count would understate.
    groups_in_nodes: bool = True


@dataclass(frozen=True, slots=True)
class FifoJob:
    """A waiting job as the FIFO pass sees it."""

    spec: JobSpec
    queue: str
    queued_at: float  # when it (re)entered its queue; a preempted job keeps its old time
    tiebreak: str = ""  # the last sort key (the shell's stable order for equal times)
    name: str = ""  # how the messages of the jobs behind it name it (default: the job id)
    gate: Gate | None = None  # the entry checks' verdict (None: they admit it)
    ran_before: bool = False  # a "never fits" verdict then means broken hardware: it waits instead of failing
    min_gpus: int | None = None  # an elastic job's guaranteed size (its minimum replicas); None: rigid

    @property
    def needed(self) -> int:
        """The GPUs its queue's cap and the free count must allow: an elastic job is guaranteed its minimum."""
        return self.spec.num_gpus if self.min_gpus is None else self.min_gpus

    @property
    def label(self) -> str:
        return self.name or self.spec.job_id


@dataclass(frozen=True, slots=True)
class FifoHooks:
    """What the pass asks of the shell beyond placing a rigid job. ``place_elastic(job, gpu_room)``: the
    elastic job at the largest size that fits now within ``gpu_room`` GPUs of its queue (None: no cap), or
    :class:`PlacementInfeasible`. ``take_growth(job)``: a placement made by taking lower-priority elastic jobs'
    growth replicas (the shell records those shrinks), or None when that would not do."""

    place_elastic: Callable[[FifoJob, int | None], Placement] | None = None
    take_growth: Callable[[FifoJob], Placement | None] | None = None


LineKey = tuple[str, int, float, str, str]


@functools.lru_cache(maxsize=4096)
def behind_blocked_head(queue: str) -> tuple[str]:
    """Why a job behind its queue's blocked head waits: one tuple per queue, not one string per job (a pass
    that decides a line of thousands says it to each of them)."""
    return (f"waiting behind the blocked head of queue {queue} (strict FIFO)",)


def line_key(queue: str, priority: int, queued_at: float, tiebreak: str, job_id: str) -> LineKey:
    """Where a job stands: its queue, then priority (higher first), then queue time, then the tie-break."""
    return (queue, -priority, queued_at, tiebreak, job_id)


def fifo_key(job: FifoJob) -> LineKey:
    return line_key(job.queue, job.spec.priority, job.queued_at, job.tiebreak, job.spec.job_id)


def room_refusal(state: ClusterState, gpus: int, spec: JobSpec | None = None) -> str | None:
    """Why a job needing ``gpus`` cannot fit now by count alone (more GPUs than are free for new work), or
    None when it might. A necessary condition for any placer (a baseline may split a TP group); never "never".

    With the job's ``spec`` the refusal names what a TP-keeping placer lacks, the TP groups the free GPUs can
    hold each inside one node ("3 such groups" while 31 GPUs are free on 4 nodes is what a user must know:
    the free count alone said one GPU was missing). A TP group larger than any node (an NVLink clique's
    trays) is refused by the count alone: its placer words the clique refusal itself."""
    free = state.counts()["free"]
    if gpus <= free:
        return None
    if spec is not None and spec.tp > 1 and spec.tp <= state.topology.max_gpus_per_node:
        groups, have = -(-gpus // spec.tp), free_groups(state, spec)
        if have < groups:
            return (
                f"needs {groups} TP group{'s' if groups != 1 else ''} of {spec.tp} GPUs, each inside one node;"
                f" {_groups_free(have)}"
                f" ({free} GPUs free)"
            )
    return f"needs {gpus} GPUs; {free} are free"


def _groups_free(count: int) -> str:
    if count == 0:
        return "no such group is free"
    return "only 1 such group is free" if count == 1 else f"only {count} such groups are free"


def free_groups(state: ClusterState, spec: JobSpec) -> int:
    """How many of ``spec``'s TP groups (``tp`` GPUs with its memory, on one node) the free GPUs could hold
    now, over the whole cluster: an upper bound for any placer that keeps a TP group on one node."""
    topo, mem = state.topology, spec.memory_per_gpu_gb
    return state.domain_slots(topo.top, 0, spec.tp, mem) if topo.top else state.node_slots(0, spec.tp, mem)


def gate_wait(job: FifoJob) -> Wait:
    """The wait of a job its entry checks refuse (``job.gate`` must be set)."""
    assert job.gate is not None, "gate_wait of a job its entry checks admit"
    return Wait(job.spec.job_id, job.queue, (job.gate.message,), reason=job.gate.reason)


def no_caps(queue: str) -> int | None:
    """No queue has a cap."""
    return None


@dataclass(frozen=True, slots=True)
class FifoLines:
    """The lines a FIFO pass decides: the waiting ``jobs`` (any order: sorted by :func:`fifo_key`), the GPUs
    each queue's jobs hold already (``in_use``), a queue's ``maxGPUs`` (``caps``; None: no cap), and the lines
    a head decided before (and not among ``jobs``) holds (``blocked``, queue -> that head's name): the shell
    may decide only the jobs that joined a line behind a head known not to fit, and they are decided as if
    the head had been decided first in this pass."""

    jobs: Sequence[FifoJob]
    in_use: Mapping[str, int] = field(default_factory=dict)
    caps: Callable[[str], int | None] = no_caps
    blocked: Mapping[str, str] = field(default_factory=dict)


def schedule_fifo(
    place_on: PlaceOn, lines: FifoLines, policy: FifoPolicy = FifoPolicy(), hooks: FifoHooks = FifoHooks()
) -> tuple[Admit | Wait, ...]:
    """One FIFO pass over ``lines``, placed as ``place_on`` says: admissions are allocated in its state."""
    line = _Pass(place_on, dict(lines.in_use), lines.caps, policy, hooks, dict(lines.blocked))
    decisions: list[Admit | Wait] = []
    for job in sorted(lines.jobs, key=fifo_key):
        decision = line.decide(job)
        decisions.append(decision)
        if isinstance(decision, Admit):
            placed = sum(len(group) for group in decision.placement.groups)
            line.held[job.queue] = line.held.get(job.queue, 0) + placed
    return tuple(decisions)


@dataclass
class _Pass:
    """One pass's inputs and what it has decided so far (GPUs held per queue, blocked lines)."""

    place_on: PlaceOn
    held: dict[str, int]
    caps: Callable[[str], int | None]
    policy: FifoPolicy
    hooks: FifoHooks
    blocked: dict[str, str] = field(default_factory=dict)  # queue -> the head that does not fit

    def decide(self, job: FifoJob) -> Admit | Wait:
        return _decide(self, job)

    def place(self, job: FifoJob) -> Placement:
        cap = self.caps(job.queue)
        if job.min_gpus is not None and self.hooks.place_elastic is not None:
            room = None if cap is None else cap - self.held.get(job.queue, 0)
            return self.hooks.place_elastic(job, room)
        return self.place_on.placer.place(job.spec, self.place_on.model_of(job.spec))


def _decide(line: _Pass, job: FifoJob) -> Admit | Wait:
    state, held, blocked, policy = line.place_on.state, line.held, line.blocked, line.policy
    spec, queue = job.spec, job.queue
    if job.gate is not None:
        if job.gate.blocks_line:
            blocked.setdefault(queue, job.label)
        return gate_wait(job)
    if policy.strict and queue in blocked:
        # Not naming the head: every job behind it would be rewritten each time the head changes (a queue of
        # 50 rewrote 49 statuses per admission, most of a 50,000-job flood's API writes).
        return Wait(spec.job_id, queue, behind_blocked_head(queue), reason=WaitReason.WAITING)
    refusal = quota_refusal(queue, held.get(queue, 0), job.needed, line.caps(queue))
    if refusal is not None:
        blocked.setdefault(queue, job.label)
        return Wait(spec.job_id, queue, (refusal,), reason=WaitReason.QUEUE_FULL)
    placement: Placement | None = None
    short = room_refusal(state, job.needed, spec if policy.groups_in_nodes else None) if state.allocations else None
    reasons: Sequence[str] = (short,) if short is not None else ()
    if short is None:
        try:
            placement = line.place(job)
        except PlacementInfeasible as exc:
            if fails_for_good(exc.permanent, job.ran_before):
                return Wait(spec.job_id, queue, exc.reasons, permanent=True)
            reasons = exc.reasons
    if placement is None:
        # Before it waits: growth replicas of lower-priority elastic jobs, the cheapest preemption and the only
        # one this path makes; an elastic job is admitted at its minimum when that fits, and waits otherwise.
        elastic = job.min_gpus is not None
        take = line.hooks.take_growth if takes_growth_replicas(elastic, whole_gangs_next=False) else None
        placement = take(job) if take is not None else None
        if placement is None:
            blocked.setdefault(queue, job.label)
            return Wait(spec.job_id, queue, tuple(reasons), reason=WaitReason.UNSCHEDULABLE)
    state.allocate(Allocation(spec.job_id, placement.groups, spec.memory_per_gpu_gb))
    return Admit(spec.job_id, queue, placement, ())

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

The operator (``k8s/plan/fifo_admission.py``) and the simulator (``sim/run/policies.py``) both call
:func:`schedule_fifo`; it allocates every admission in ``state`` and returns the decisions as values, in
the order taken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from paralleljob.core.admission import Admit, Models, Wait
from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.gates import Gate, WaitReason, quota_refusal
from paralleljob.core.job import JobSpec
from paralleljob.core.placement import PlacerLike


@dataclass(frozen=True, slots=True)
class FifoPolicy:
    """The strict FIFO queue policy. ``strict`` False is best effort: a head that does not fit is skipped
    and the jobs behind it are tried (they may starve it)."""

    strict: bool = True


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

    @property
    def label(self) -> str:
        return self.name or self.spec.job_id


LineKey = tuple[str, int, float, str, str]


def line_key(queue: str, priority: int, queued_at: float, tiebreak: str, job_id: str) -> LineKey:
    """Where a job stands: its queue, then priority (higher first), then queue time, then the tie-break."""
    return (queue, -priority, queued_at, tiebreak, job_id)


def fifo_key(job: FifoJob) -> LineKey:
    return line_key(job.queue, job.spec.priority, job.queued_at, job.tiebreak, job.spec.job_id)


def room_refusal(state: ClusterState, spec: JobSpec) -> str | None:
    """Why ``spec`` cannot fit now by count alone (it needs more GPUs than are free for new work), or None
    when it might. A necessary condition for any placer (a baseline may split a TP group); never "never"."""
    free = state.counts()["free"]
    if spec.num_gpus <= free:
        return None
    return f"needs {spec.num_gpus} GPUs; {free} are free"


def free_groups(state: ClusterState, spec: JobSpec) -> int:
    """How many of ``spec``'s TP groups (``tp`` GPUs with its memory, on one node) the free GPUs could hold
    now, over the whole cluster: an upper bound for any placer that keeps a TP group on one node."""
    topo, mem = state.topology, spec.memory_per_gpu_gb
    return state.domain_slots(topo.top, 0, spec.tp, mem) if topo.top else state.node_slots(0, spec.tp, mem)


def gate_wait(job: FifoJob) -> Wait:
    """The wait of a job its entry checks refuse (``job.gate`` must be set)."""
    assert job.gate is not None, "gate_wait of a job its entry checks admit"
    return Wait(job.spec.job_id, job.queue, (job.gate.message,), reason=job.gate.reason)


def schedule_fifo(
    state: ClusterState,
    placer: PlacerLike,
    model: Models,
    jobs: Sequence[FifoJob],
    in_use: Mapping[str, int],
    caps: Callable[[str], int | None],
    policy: FifoPolicy = FifoPolicy(),
) -> tuple[Admit | Wait, ...]:
    """One FIFO pass over ``jobs`` (any order: sorted here by :func:`fifo_key`). ``in_use``: GPUs each queue's
    jobs hold already; ``caps``: a queue's ``maxGPUs`` (None: no cap). Admissions are allocated in ``state``."""
    held = dict(in_use)
    blocked: dict[str, str] = {}  # queue -> the head that does not fit
    decisions: list[Admit | Wait] = []
    for job in sorted(jobs, key=fifo_key):
        decision = _decide(state, placer, model, job, held, blocked, caps, policy)
        decisions.append(decision)
        if isinstance(decision, Admit):
            held[job.queue] = held.get(job.queue, 0) + job.spec.num_gpus
    return tuple(decisions)


def _decide(
    state: ClusterState,
    placer: PlacerLike,
    model: Models,
    job: FifoJob,
    held: Mapping[str, int],
    blocked: dict[str, str],
    caps: Callable[[str], int | None],
    policy: FifoPolicy,
) -> Admit | Wait:
    spec, queue = job.spec, job.queue
    if job.gate is not None:
        if job.gate.blocks_line:
            blocked.setdefault(queue, job.label)
        return gate_wait(job)
    if policy.strict and queue in blocked:
        why = f"waiting behind {blocked[queue]} in queue {queue} (strict FIFO)"
        return Wait(spec.job_id, queue, (why,), reason=WaitReason.WAITING)
    refusal = quota_refusal(queue, held.get(queue, 0), spec.num_gpus, caps(queue))
    if refusal is not None:
        blocked.setdefault(queue, job.label)
        return Wait(spec.job_id, queue, (refusal,), reason=WaitReason.QUEUE_FULL)
    short = room_refusal(state, spec) if state.allocations else None
    if short is not None:
        blocked.setdefault(queue, job.label)
        return Wait(spec.job_id, queue, (short,), reason=WaitReason.UNSCHEDULABLE)
    try:
        placement = placer.place(spec, model(spec) if callable(model) else model)
    except PlacementInfeasible as exc:
        if exc.permanent and not job.ran_before:
            return Wait(spec.job_id, queue, exc.reasons, permanent=True)
        blocked.setdefault(queue, job.label)
        return Wait(spec.job_id, queue, exc.reasons, reason=WaitReason.UNSCHEDULABLE)
    state.allocate(Allocation(spec.job_id, placement.groups, spec.memory_per_gpu_gb))
    return Admit(spec.job_id, queue, placement, ())

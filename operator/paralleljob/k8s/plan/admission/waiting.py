"""The waiting memo: the jobs a pass need not look at, so strict FIFO admission costs in proportion to what
changed. Besides waiting lines it keeps the running and finished jobs a pass found with nothing to do
(:class:`Steady`, :class:`Done`), which the next pass reuses while nothing of theirs changed.

This module holds the memo and sorts a pass's jobs before any decision (:func:`triage`);
``waiting_lines.py`` admits the lines and says which of them a pass must look at, and
``waiting_remember.py`` writes what a pass decided back into the memo.

With thousands of jobs queued, most passes change nothing for almost all of them: a queue whose head does not
fit holds its line, and nothing the line's verdicts rest on has moved. :class:`WaitingMemo` is kept by the
reconciler between passes, like the view: it remembers the queued jobs a pass decided with nothing to write,
and for each queue line its head's verdict and the facts behind it. ``decide`` leaves a line out entirely
(no decision, no status write; its jobs still counted in the gauges and queue statuses) while all of these
hold, and sends it through the core FIFO pass from its head otherwise:

- every job of the line is the very object the memo holds (no spec, status or deletion since), and none is
  busy, held back (BackingOff), or named in what the runtime reported (bind failures, API trouble);
- the line lost no job (deleted, admitted elsewhere, moved to another queue), and any it gained are
  *arrivals*: waiting jobs the memo never held (a new job, or one whose first status write is still on its
  way), each standing behind the head the memo remembers blocking the line (``LineMemo.head_at``: the core's
  order, priority then queue time then tie-break; a job with no status yet goes by its creation time);
- its ParallelJobQueue's cap and namespaces are as they were, and, where it caps GPUs, so are the GPUs its
  jobs hold (without a cap they decide no verdict);
- no GPU came free since the last look (none that the kept view owned then is unowned now, and no node
  changed), or its head still needs more TP groups than the free GPUs could hold, each on one node (a count:
  the operator's placer never splits a TP group), so the jobs behind a strict head wait whatever happens.

A line left out with arrivals has only its arrivals decided: in one core FIFO call after the other lines,
told that the line is held by that head (``schedule_fifo``'s ``blocked``), so each gets what the full pass
gives a job behind a blocked head (its own entry checks first, then "waiting behind the blocked head"), with the same
first status write. Those with nothing left to write join the remembered line (``waiting_remember.remember``);
the others are arrivals again next pass. A line decided whole is remembered likewise when its blocking head
and the jobs ahead of it may be, even if some behind the head may not (a first write still in flight, a
hold): those wait outside it as arrivals (``waiting_remember``), or in a flood, where every line always has a new job
being written, no line would ever be remembered. An arrival ahead of the head, or a line with no blocking head,
sends the whole line through the pass. A flood (new jobs on every line on every pass) thus costs a pass in
proportion to the arrivals, not to all the jobs waiting.

The head itself may have a write of its own: a new head (the one before it was admitted) says why it waits
now, a head's figures moved. Forgetting the line for that write sent it through the pass whole twice for each
admission or freed GPU, most of a flood's decisions. Such a head (still Queued, a kind the memo holds) waits
outside its line instead (``LineMemo.members`` lacks it): it is decided first on every pass, as an arrival
(``waiting_lines.outside_head``); while it still blocks the rest stays left out, once it goes in (or leaves,
or no longer stands where the line remembers it) the line is decided whole, and once it has nothing to write
it joins the line again.

When the API server is saturated, the arrivals are mostly jobs whose first status write has not even started:
the runtime starts at most ``OperatorConfig.background_chains`` status-only chains at once and holds the rest
back, so deciding them all again each pass (40,000 such jobs: 4-6 s a pass) bought nothing. Given the room
the runtime has now (``Observed.background_room``; None: no limit, as in the tests and the simulator),
:func:`triage` (``defer``) does not decide a Pending arrival, not busy, that stands behind its line's
remembered blocking head (:func:`stands_behind`: its place in line read from its object, by the very
``line_position`` the core FIFO pass sorts the decided entry by); ``waiting_lines.admit_lines`` then decides,
among the lines it leaves out, only as many of those as there is room for (``waiting_lines.within_room``: each
line's in line order, the lines merged oldest first). The others are not decided at all (no status draft, no core FIFO
call): counted as Pending and as waiting in their queue (``Plan.skipped_pending``) and arrivals again next
pass. A line the pass looks at after all (its head may fit, its queue changed) decides its deferred arrivals
with the rest, so the line goes through the core FIFO pass whole and strict FIFO admits no job out of turn:
a job left undecided only stands behind a head that still blocks, where the full pass gives it "waiting
behind <head>" and nothing else, which it gets on the pass that has room for its write.

Only the default policy (strict FIFO without a core queue policy) uses it; best-effort FIFO and the core's
queueing pass look at every job. The property tests (``tests/property/test_waiting_memo_properties.py``) run
random event sequences with and without the memo and compare every job's phase, reason and placement, as
the view's kept-vs-rebuild check does for nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.admit.admission import Wait
from paralleljob.core.admit.fifo import LineKey, free_groups
from paralleljob.core.admit.gates import WaitReason
from paralleljob.core.cluster import ClusterState
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_time
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.admission.fifo_admission import line_position
from paralleljob.k8s.plan.kinds.picker import kind_of

WAITING = (Phase.PENDING, Phase.QUEUED, Phase.PREEMPTED)  # phases of a job that stands in a line (as ACTIVE)
QueueFacts = tuple[int | None, tuple[str, ...]] | None  # a queue object's cap and namespaces (None: no object)


Figures = tuple[int, int]  # free GPUs, and the TP groups of a head's shape they hold (each inside one node)


def figures(state: ClusterState, head: JobSpec) -> Figures:
    """What a head's "does not fit" message counts (``core.admit.fifo.room_refusal``, the placer's refusal): when
    these move, the message is worked out again, so a line left out never shows figures that no longer hold
    (an old "8 are free" while 31 are)."""
    return state.counts()["free"], free_groups(state, head)


def queue_facts(info: QueueInfo | None) -> QueueFacts:
    return None if info is None else (info.max_gpus, tuple(info.namespaces))


@dataclass(frozen=True, slots=True)
class LineMemo:
    """One queue line as last decided: its waiting jobs, the facts its verdicts rest on, and its head."""

    members: frozenset[str]  # without the head while it waits outside its line (its own write landing)
    facts: QueueFacts
    in_use: int  # GPUs the queue's jobs held after that pass
    head_reason: WaitReason | None  # why the head that blocks the line waits (None: no head blocks it)
    head: JobSpec | None  # that head's shape
    head_key: str = ""
    oldest: str = ""  # the earliest ``queuedAt`` of its jobs: the queue-wait gauge reads it while it is left out
    head_name: str = ""  # the head as the core FIFO pass's ``blocked`` names it: the core's FifoJob.label
    head_at: LineKey | None = None  # the head's place in line (core.admit.fifo.line_key): a newcomer behind it waits
    # the earliest ``queuedAt`` of its jobs but the head: what the gauge reads when a pass looked at the head alone
    # (``waiting_lines.Look.HEAD``) and left the rest out, the head then counted from its own decision
    oldest_behind: str = ""


@dataclass(frozen=True, slots=True)
class Steady:
    """A running job a pass found with nothing to do: its object, its pods (by identity), those decisions."""

    job: JobObject
    pods: tuple[int, ...]
    actions: JobActions


@dataclass(frozen=True, slots=True)
class Done:
    """A finished job a pass found with nothing to do: its object, its pods (by identity), and when its
    ``ttlSecondsAfterFinished`` runs out (None: never). Kept without its decisions: a drained queue without
    TTLs piles up tens of thousands of these, and a finished job's draft (a copy of its status) and empty
    action lists were most of what each cost (~3 KB)."""

    job: JobObject
    pods: tuple[int, ...]
    wake_at: float | None


@dataclass
class WaitingMemo:
    """What the last passes decided for waiting jobs, and which running jobs were steady (the containers
    change as passes go)."""

    jobs: dict[str, JobObject] = field(default_factory=dict)  # key -> the object decided Queued, nothing to write
    lines: dict[str, LineMemo] = field(default_factory=dict)
    owner: list[str | None] = field(default_factory=list)  # the kept view's GPU owners before admission
    running: dict[str, Steady] = field(default_factory=dict)
    finished: dict[str, Done] = field(default_factory=dict)  # Succeeded or Failed, nothing left to do
    # queue -> the figures its head's "does not fit" message was worked out from (:func:`figures`)
    figures: dict[str, Figures] = field(default_factory=dict)

    def clear(self) -> None:
        self.jobs.clear()
        self.lines.clear()
        self.figures.clear()
        self.owner = []
        self.running.clear()
        self.finished.clear()


def pod_ids(pods: Sequence[PodInfo]) -> tuple[int, ...]:
    """The pods as the store holds them: a changed pod is a new object (the stores parse each version once)."""
    return tuple(map(id, pods))


@dataclass(frozen=True, slots=True)
class Triage:
    """The jobs of one pass sorted before any decision: those to decide, and lines that may stay quiet."""

    to_decide: list[JobObject]
    quiet: dict[str, list[JobObject]]  # queue -> its jobs, all unchanged; confirmed by ``waiting_lines.look``
    finished: list[Done] = field(default_factory=list)  # finished jobs as they were, pods too: left out
    finished_by_phase: dict[str, int] = field(default_factory=dict)  # their count per phase, for the gauges
    wake_at: float | None = None  # the earliest deadline among them (a TTL after finishing), epoch seconds
    arrivals: dict[str, list[JobObject]] = field(default_factory=dict)  # quiet queue -> its new waiting jobs
    # quiet queue -> its arrivals with no status yet that stand behind its remembered head, not decided yet
    # (``defer``): ``waiting_lines.admit_lines`` decides as many as a first status write can start for
    deferred: dict[str, list[JobObject]] = field(default_factory=dict)


def triage(
    memo: WaitingMemo | None,
    jobs: Sequence[JobObject],
    untouchable: Mapping[str, object] | frozenset[str],
    pods_of: Callable[[JobObject], Sequence[PodInfo]] | None = None,
    now_s: float = 0.0,
    defer: bool = False,
) -> Triage:
    """Split the pass's jobs: a line stays a candidate for quiet when every job the memo holds for it is here,
    unchanged, and not ``untouchable`` (busy, held back, reported by the runtime), and the only other jobs in it
    are waiting jobs the memo does not hold (``arrivals``: decided, and judged against the line's head in
    ``waiting_lines.admit_lines``).
    A finished job the memo holds is left out while it and its pods (``pods_of``) are as they were and its
    deadline, if any (``ttlSecondsAfterFinished``), is after ``now_s``.
    ``defer``: an arrival whose first status write has yet to start (Pending, not busy) and that stands behind
    its line's remembered blocking head (:func:`stands_behind`, read from its object) is not decided here but
    put in ``deferred``, for ``waiting_lines.admit_lines`` to decide within the pass's background room."""
    if memo is None or not (memo.lines or memo.finished):
        return Triage(list(jobs), {})
    to_decide: list[JobObject] = []
    candidates: dict[str, list[JobObject]] = {}
    dirty: set[str] = set()
    arrivals: dict[str, list[JobObject]] = {}
    deferred: dict[str, list[JobObject]] = {}
    finished: list[Done] = []
    finished_by_phase: dict[str, int] = {}
    wake_at: float | None = None
    kept_jobs, lines, done = memo.jobs, memo.lines, memo.finished  # locals: this loop runs for every job of every pass
    for job in jobs:
        key = job.key
        steady = done.get(key)
        if (
            steady is not None
            and steady.job is job
            and pods_of is not None
            and key not in untouchable
            and steady.pods == pod_ids(pods_of(job))
            and ((due := steady.wake_at) is None or due > now_s)
        ):
            finished.append(steady)
            phase = job.phase.value
            finished_by_phase[phase] = finished_by_phase.get(phase, 0) + 1
            if due is not None and (wake_at is None or due < wake_at):
                wake_at = due  # its ttlSecondsAfterFinished ends then: the loop must pass again
            continue
        kept = kept_jobs.get(key)
        if kept is job and key not in untouchable:
            queue = job.request.queue if job.request is not None else None
            if queue in lines:
                members = candidates.get(queue)
                if members is None:
                    candidates[queue] = [job]
                else:
                    members.append(job)
                continue
        request = job.request
        queue = request.queue if request is not None else None
        if (
            defer
            and kept is None
            and request is not None
            and job.phase is Phase.PENDING
            and not job.deleting
            and kind_of(request).renders_pods  # a pod group's pods, not its line, decide when it goes
            and key not in untouchable
            and (line := lines.get(request.queue)) is not None
            and stands_behind(line, job, request)
        ):
            deferred.setdefault(request.queue, []).append(job)  # decided by admit_lines if its line stays quiet
            continue
        to_decide.append(job)
        if kept is not None and kept.request is not None:
            dirty.add(kept.request.queue)  # it changed: its old line moves
        if queue is not None and (job.phase in WAITING or job.deleting):
            # a job joins the line (a running job's line moves by in_use and freed GPUs): one the memo never
            # held may leave it quiet if it stands behind the head (admit_lines); any other change moves it
            if kept is None and not job.deleting and queue in lines:
                arrived = arrivals.get(queue)
                if arrived is None:
                    arrivals[queue] = [job]
                else:
                    arrived.append(job)
            else:
                dirty.add(queue)
    quiet: dict[str, list[JobObject]] = {}
    for queue, members in candidates.items():
        if queue in dirty or len(members) != len(memo.lines[queue].members):
            to_decide.extend(members)  # a job of the line changed or left
        else:
            quiet[queue] = members
    arrived_quiet = {queue: jobs for queue, jobs in arrivals.items() if queue in quiet}
    for queue in list(deferred):
        if queue not in quiet:
            to_decide.extend(deferred.pop(queue))  # its line is decided whole: so are they, as before
    return Triage(to_decide, quiet, finished, finished_by_phase, wake_at, arrived_quiet, deferred)


def stands_behind(line: LineMemo, job: JobObject, request: JobRequest) -> bool:
    """Whether a job, read from its object alone (undecided), sorts behind the line's remembered blocking
    head in the core's order (``line_position``: what the FIFO pass sorts the decided entry by)."""
    if line.head_reason is None or line.head_at is None or not line.head_name:
        return False
    return line_position(job, request) > line.head_at


def stands_behind_at(head_at: LineKey, job: JobObject) -> bool:
    """Whether a job sorts behind a head standing at ``head_at`` (the same order as :func:`stands_behind`)."""
    return job.request is not None and line_position(job, job.request) > head_at


def earliest(stamps: Iterable[str]) -> str:
    """The earliest of some RFC 3339 stamps (compared as times, not as text); "" when none can be read."""
    best, best_s = "", float("inf")
    for stamp in stamps:
        seconds = parse_time(stamp)
        if seconds is not None and seconds < best_s:
            best, best_s = stamp, seconds
    return best


def blocks(decision: Wait) -> bool:
    """Whether a wait holds its line (the head): anything but a non-blocking refusal or a job behind it."""
    return not decision.permanent and decision.reason not in (WaitReason.WAITING, WaitReason.QUEUE_REFUSED)

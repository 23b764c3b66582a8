"""The waiting jobs a pass need not look at: strict FIFO admission proportional to what changed.

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
- its ParallelJobQueue's cap and namespaces are as they were, and so are the GPUs its jobs hold;
- no GPU came free since the last look (none that the kept view owned then is unowned now, and no node
  changed), or its head still needs more TP groups than the free GPUs could hold, each on one node (a count:
  the operator's placer never splits a TP group), so the jobs behind a strict head wait whatever happens.

A line left out with arrivals has only its arrivals decided: in one core FIFO call after the other lines,
told that the line is held by that head (``schedule_fifo``'s ``blocked``), so each gets what the full pass
gives a job behind a blocked head (its own entry checks first, then "waiting behind the blocked head"), with the same
first status write. Those with nothing left to write join the remembered line (:func:`remember`, ``_grow``);
the others are arrivals again next pass. A line decided whole is remembered likewise when its blocking head
and the jobs ahead of it may be, even if some behind the head may not (a first write still in flight, a
hold): those wait outside it as arrivals (``_rebuild``), or in a flood, where every line always has a new job
being written, no line would ever be remembered. An arrival ahead of the head, or a line with no blocking head,
sends the whole line through the pass. A flood (new jobs on every line on every pass) thus costs a pass in
proportion to the arrivals, not to all the jobs waiting.

When the API server is saturated, the arrivals are mostly jobs whose first status write has not even started:
the runtime starts at most ``OperatorConfig.background_chains`` status-only chains at once and holds the rest
back, so deciding them all again each pass (40,000 such jobs: 4-6 s a pass) bought nothing. Given the room
the runtime has now (``Observed.background_room``; None: no limit, as in the tests and the simulator),
:func:`triage` (``defer``) does not decide a Pending arrival, not busy, that stands behind its line's
remembered blocking head (:func:`stands_behind`: its place in line read from its object, by the very
``line_position`` the core FIFO pass sorts the decided entry by); :func:`admit_lines` then decides, among the
lines it leaves out, only as many of those as there is room for (:func:`within_room`: each line's in line
order, the lines merged oldest first). The others are not decided at all (no status draft, no core FIFO
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

import enum
import heapq
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from paralleljob.core.admission import Admit, Wait
from paralleljob.core.cluster import ClusterState
from paralleljob.core.fifo import LineKey, free_groups
from paralleljob.core.gates import WaitReason
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.pods import PodInfo
from paralleljob.k8s.edge.queues import QueueInfo, parse_time
from paralleljob.k8s.edge.specs import JobObject, JobRequest
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.fifo_admission import line_position
from paralleljob.k8s.plan.ttl import deadline

WAITING = (Phase.PENDING, Phase.QUEUED, Phase.PREEMPTED)  # phases of a job that stands in a line (as ACTIVE)
QueueFacts = tuple[int | None, tuple[str, ...]] | None  # a queue object's cap and namespaces (None: no object)


Figures = tuple[int, int]  # free GPUs, and the TP groups of a head's shape they hold (each inside one node)


def figures(state: ClusterState, head: JobSpec) -> Figures:
    """What a head's "does not fit" message counts (``core.fifo.room_refusal``, the placer's refusal): when
    these move, the message is worked out again, so a line left out never shows figures that no longer hold
    (an old "8 are free" while 31 are)."""
    return state.counts()["free"], free_groups(state, head)


def queue_facts(info: QueueInfo | None) -> QueueFacts:
    return None if info is None else (info.max_gpus, tuple(info.namespaces))


@dataclass(frozen=True, slots=True)
class LineMemo:
    """One queue line as last decided: its waiting jobs, the facts its verdicts rest on, and its head."""

    members: frozenset[str]
    facts: QueueFacts
    in_use: int  # GPUs the queue's jobs held after that pass
    head_reason: WaitReason | None  # why the head that blocks the line waits (None: no head blocks it)
    head: JobSpec | None  # that head's shape
    head_key: str = ""
    oldest: str = ""  # the earliest ``queuedAt`` of its jobs: the queue-wait gauge reads it while it is left out
    head_name: str = ""  # the head as the core FIFO pass's ``blocked`` names it: the core's FifoJob.label
    head_at: LineKey | None = None  # the head's place in line (core.fifo.line_key): a newcomer behind it waits


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


def remember_running(
    memo: WaitingMemo,
    decided: Iterable[JobActions],
    pods_of: Callable[[JobObject], Sequence[PodInfo]],
    untouchable: Collection[str],
    finished: Iterable[Done] = (),
) -> None:
    """Keep the running jobs that need nothing while nothing of theirs changes: Running before and after,
    nothing to write, never repaired (a repaired job is re-priced against the free GPUs now and then), no
    preemption under way (its deadline is a time), not a pod group (its pods are decided elsewhere), and not
    held back or busy. A node that changes clears the memo (``decide``): health is read from the nodes.
    Finished jobs likewise (Succeeded or Failed before and after, nothing to do, not being deleted): those the
    triage left out (``finished``) stay kept; they are what a queue that drains piles up. One with a
    ``ttlSecondsAfterFinished`` still to run is kept until its deadline (``ttl.deadline``; see triage)."""
    memo.finished = {steady.job.key: steady for steady in finished}
    before, memo.running = memo.running, {}
    for actions in decided:
        job = actions.job
        steady = before.get(job.key)
        if steady is not None and steady.actions is actions:
            memo.running[job.key] = steady  # reused this pass: steady still
            continue
        if (
            job.phase is Phase.RUNNING
            and actions.draft.phase is Phase.RUNNING
            and not actions.has_work
            and job.restarts == 0
            and "preemption" not in actions.draft.data
            and "drain" not in actions.draft.data  # a drain's deadline is a time too
            and "lastDrain" not in actions.draft.data  # moved by a drain: re-priced like a repaired job
            and job.request is not None
            and not job.request.pod_group
            and not job.deleting
            and job.key not in untouchable
        ):
            memo.running[job.key] = Steady(job, pod_ids(pods_of(job)), actions)
        elif (
            job.phase.terminal
            and actions.draft.phase is job.phase
            and not actions.has_work
            and not job.deleting
            and job.key not in untouchable
            # a TTL still to run is kept too: its deadline (wake_at) brings it back (triage, plan/ttl.py)
        ):
            memo.finished[job.key] = Done(job, pod_ids(pods_of(job)), deadline(actions))


@dataclass(frozen=True, slots=True)
class Triage:
    """The jobs of one pass sorted before any decision: those to decide, and lines that may stay quiet."""

    to_decide: list[JobObject]
    quiet: dict[str, list[JobObject]]  # queue -> its jobs, all unchanged; confirmed by :func:`still_quiet`
    finished: list[Done] = field(default_factory=list)  # finished jobs as they were, pods too: left out
    finished_by_phase: dict[str, int] = field(default_factory=dict)  # their count per phase, for the gauges
    wake_at: float | None = None  # the earliest deadline among them (a TTL after finishing), epoch seconds
    arrivals: dict[str, list[JobObject]] = field(default_factory=dict)  # quiet queue -> its new waiting jobs
    # quiet queue -> its arrivals with no status yet that stand behind its remembered head, not decided yet
    # (``defer``): :func:`admit_lines` decides as many as a first status write can start for
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
    :func:`admit_lines`).
    A finished job the memo holds is left out while it and its pods (``pods_of``) are as they were and its
    deadline, if any (``ttlSecondsAfterFinished``), is after ``now_s``.
    ``defer``: an arrival whose first status write has yet to start (Pending, not busy) and that stands behind
    its line's remembered blocking head (:func:`stands_behind`, read from its object) is not decided here but
    put in ``deferred``, for :func:`admit_lines` to decide within the pass's background room."""
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
            and not request.pod_group
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


def capacity_freed(memo: WaitingMemo, state: ClusterState | None) -> bool:
    """Whether any GPU the kept view owned at the last look is unowned now (or there is nothing to compare)."""
    if state is None or len(memo.owner) != len(state.owner):
        return True
    return any(then is not None and now is None for then, now in zip(memo.owner, state.owner, strict=True))


class Look(enum.Enum):
    """How much of a candidate line a pass must look at."""

    NOTHING = "nothing"  # left out
    HEAD = "head"  # GPUs came free that might hold its head: the head first, the rest only if it gets in
    ALL = "all"  # its queue or the GPUs its jobs hold changed (or its head waits for something else)


def look(
    memo: WaitingMemo, queue: str, info: QueueInfo | None, in_use: int, freed: bool, state: ClusterState | None
) -> Look:
    """What a candidate line needs this pass, judged when its turn comes (after the lines before it admitted)."""
    line = memo.lines[queue]
    if line.facts != queue_facts(info) or line.in_use != in_use:
        return Look.ALL
    if (
        line.head_reason is WaitReason.UNSCHEDULABLE
        and line.head is not None
        and state is not None
        and memo.figures.get(queue, (-1, -1)) != figures(state, line.head)
    ):
        return Look.HEAD  # its message's figures moved: the head is looked at again (one decision)
    if not freed or line.head_reason is None:
        return Look.NOTHING
    if line.head_reason is not WaitReason.UNSCHEDULABLE or line.head is None or state is None:
        return Look.ALL
    return Look.NOTHING if free_groups(state, line.head) < line.head.num_groups else Look.HEAD


@dataclass
class Lines:
    """What the FIFO admission of one pass did, line by line."""

    durations: list[float] = field(default_factory=list)
    decisions: list[Admit | Wait] = field(default_factory=list)
    decided: list[JobObject] = field(default_factory=list)  # jobs of candidate lines decided after all
    left_out: dict[str, list[JobObject]] = field(default_factory=dict)  # queue -> jobs not looked at
    standing: set[str] = field(default_factory=set)  # lines whose remembered head still holds them
    behind: dict[str, int] = field(default_factory=dict)  # standing line -> arrivals decided behind its head
    skipped: dict[str, list[JobObject]] = field(default_factory=dict)  # standing line -> arrivals not decided


Entry = tuple[JobObject, JobRequest]
# the core FIFO pass over some entries, with the lines a head decided earlier holds (queue -> the head's name)
Admitter = Callable[[Sequence[Entry], Mapping[str, str]], tuple[list[float], Sequence[Admit | Wait]]]


def stands_behind(line: LineMemo, job: JobObject, request: JobRequest) -> bool:
    """Whether a job, read from its object alone (undecided), sorts behind the line's remembered blocking
    head in the core's order (``line_position``: what the FIFO pass sorts the decided entry by)."""
    if line.head_reason is None or line.head_at is None or not line.head_name:
        return False
    return line_position(job, request) > line.head_at


def stands_behind_at(head_at: LineKey, job: JobObject) -> bool:
    """Whether a job sorts behind a head standing at ``head_at`` (the same order as :func:`stands_behind`)."""
    return job.request is not None and line_position(job, job.request) > head_at


def behind_head(line: LineMemo, entries: Sequence[Entry]) -> bool:
    """Whether every entry stands behind the line's remembered blocking head (trivially, when there are none):
    strict FIFO then decides them as waiting behind it whatever they are, but for their own entry checks."""
    return all(stands_behind(line, job, request) for job, request in entries)


def within_room(
    deferred: Sequence[tuple[str, list[JobObject]]], room: int | None
) -> tuple[list[JobObject], list[JobObject]]:
    """Which deferred arrivals of the lines left out are decided (``room`` of them; all when None): each
    line's in its line order, the lines' merged oldest first. Returns (decided, skipped)."""
    lines = [
        sorted(jobs, key=lambda job: line_position(job, job.request))  # type: ignore[arg-type]  # never None here
        for _, jobs in deferred
    ]
    merged = heapq.merge(*lines, key=lambda job: line_position(job, job.request)[2])  # type: ignore[arg-type]
    if room is None:
        return list(merged), []
    chosen = list(itertools.islice(merged, max(0, room)))
    picked = {id(job) for job in chosen}
    return chosen, [job for jobs in lines for job in jobs if id(job) not in picked]


def admit_lines(
    memo: WaitingMemo | None,
    queued: Sequence[Entry],
    quiet: Mapping[str, list[JobObject]],
    facts: Callable[[str], tuple[QueueInfo | None, int]],
    state: ClusterState | None,
    decide_job: Callable[[JobObject], Entry | None],
    admit: Admitter,
    deferred: Mapping[str, list[JobObject]] | None = None,
    room: int | None = None,
) -> Lines:
    """The FIFO pass line by line in queue order (as the core orders them, so the result is the same as one
    call over all): ``queued`` lines always, ``quiet`` candidates as :func:`look` says. A quiet line's entries
    in ``queued`` are its arrivals (triage): when they all stand behind a head that still blocks, only they are
    decided, behind it, in one call with the other such lines' after the rest (they allocate nothing, so
    where they are decided changes nothing); else the whole line is. ``facts``: a queue's object and the
    GPUs its jobs hold now; ``decide_job``: the pass's per-job decision (None: it does not try admission);
    ``admit``: the core FIFO pass over some entries of one line. ``deferred``: the quiet lines' arrivals that
    triage left undecided (they stand behind the remembered head): decided with their line when it is looked
    at, else only ``room`` of them (None: all), those whose first status write can start this pass
    (:func:`within_room`); the others are :attr:`Lines.skipped`, decided by a later pass."""
    by_queue: dict[str, list[Entry]] = {}
    for entry in queued:
        by_queue.setdefault(entry[1].queue, []).append(entry)
    freed = capacity_freed(memo, state) if memo is not None and quiet else False
    out = Lines()
    behind: list[Entry] = []
    heads: dict[str, str] = {}
    deferred = deferred or {}
    pool: list[tuple[str, list[JobObject]]] = []  # lines left out: their deferred arrivals, decided within room

    def run(entries: Sequence[Entry], blocked: Mapping[str, str]) -> Sequence[Admit | Wait]:
        durations, decisions = admit(entries, blocked)
        out.durations.extend(durations)
        out.decisions.extend(decisions)
        if memo is not None and state is not None and not blocked:
            _count_figures(memo, state, entries, decisions)
        return decisions

    def decided(jobs: Sequence[JobObject]) -> list[Entry]:
        out.decided.extend(jobs)
        return [entry for job in jobs if (entry := decide_job(job)) is not None]

    for queue in sorted(set(by_queue) | set(quiet)):
        entries = by_queue.get(queue, [])
        members = quiet.get(queue)
        if members is not None and memo is not None:
            info, in_use = facts(queue)
            line = memo.lines[queue]
            verdict = look(memo, queue, info, in_use, freed, state)
            if not behind_head(line, entries):
                verdict = Look.ALL  # an arrival sorts ahead of the head, or no head blocks the line
            if verdict is Look.HEAD:
                rest = [job for job in members if job.key != line.head_key]
                decisions = run(decided([job for job in members if job.key == line.head_key]), {})
                if any(isinstance(d, Wait) and blocks(d) for d in decisions):
                    verdict, members = Look.NOTHING, rest  # it still waits: so does everything behind it
                else:
                    members = rest
            if verdict is Look.NOTHING:
                out.left_out[queue] = members
                out.standing.add(queue)
                if entries:
                    behind.extend(entries)
                    heads[queue] = line.head_name
                    out.behind[queue] = len(entries)
                if deferred.get(queue):
                    pool.append((queue, deferred[queue]))
                    heads[queue] = line.head_name
                continue
            entries = entries + decided(members) + decided(deferred.get(queue, []))
        if entries:
            run(entries, {})
    chosen, skipped = within_room(pool, room)
    for entry in decided(chosen):
        behind.append(entry)
        out.behind[entry[1].queue] = out.behind.get(entry[1].queue, 0) + 1
    for job in skipped:
        out.skipped.setdefault(job.request.queue if job.request is not None else "", []).append(job)
    if behind:
        run(behind, heads)
    return out


def _count_figures(
    memo: WaitingMemo, state: ClusterState, entries: Sequence[Entry], decisions: Sequence[Admit | Wait]
) -> None:
    """After one line's decisions: the figures its blocking head's message was worked out from (the state
    then: the lines decided later this pass may take GPUs, and the next pass sees that they moved)."""
    specs = {request.spec.job_id: request.spec for _, request in entries}
    for decision in decisions:
        if isinstance(decision, Wait) and blocks(decision) and decision.job_id in specs:
            if decision.reason is WaitReason.UNSCHEDULABLE:
                memo.figures[decision.queue] = figures(state, specs[decision.job_id])
            else:
                memo.figures.pop(decision.queue, None)
            return


def remember(
    memo: WaitingMemo,
    decided: Mapping[str, tuple[JobObject, bool]],
    decisions: Sequence[Admit | Wait],
    queues: Mapping[str, QueueInfo],
    in_use: Mapping[str, int],
    owner: list[str | None],
    standing: Collection[str] = (),
) -> None:
    """After a pass: ``decided`` maps each job of the lines it looked at to (the object, whether it may be
    remembered: it ended Queued with nothing to write); ``decisions`` are the core FIFO pass's, in order;
    ``owner`` the view's GPU owners before admission. A line is remembered only when all its jobs are, but
    a ``standing`` line (its remembered head still holds it: :attr:`Lines.standing`) keeps what it was and
    takes in the arrivals that may be remembered; the others are decided again next pass, as arrivals."""
    grown: dict[str, list[tuple[str, JobObject, bool]]] = {}
    others: dict[str, tuple[JobObject, bool]] = {}
    for key, (job, keep) in decided.items():
        queue = job.request.queue if job.request is not None else None
        if queue is not None and queue in standing and queue in memo.lines:
            grown.setdefault(queue, []).append((key, job, keep))
        else:
            others[key] = (job, keep)
    for queue, jobs in grown.items():
        _grow(memo, queue, jobs)
    _rebuild(memo, others, decisions, queues, in_use)
    memo.owner = owner


def _grow(memo: WaitingMemo, queue: str, jobs: Sequence[tuple[str, JobObject, bool]]) -> None:
    """A standing line after its arrivals (and maybe its head) were decided: the arrivals with nothing to
    write join it; one still being written waits outside it (decided again next pass, behind the head). A head
    with something to write (its message changed) forgets the line: the next pass decides it whole."""
    line = memo.lines[queue]
    if any(not keep for key, _, keep in jobs if key in line.members):
        del memo.lines[queue]
        for key in line.members:
            memo.jobs.pop(key, None)
        return
    joined = [(key, job) for key, job, keep in jobs if keep and key not in line.members]
    for key, job in joined:
        memo.jobs[key] = job
    if joined:
        oldest = earliest([line.oldest, *(job.queued_at for _, job in joined)])
        memo.lines[queue] = replace(line, members=line.members | {key for key, _ in joined}, oldest=oldest)


def _rebuild(
    memo: WaitingMemo,
    decided: Mapping[str, tuple[JobObject, bool]],
    decisions: Sequence[Admit | Wait],
    queues: Mapping[str, QueueInfo],
    in_use: Mapping[str, int],
) -> None:
    """The lines a pass looked at whole: each remembered anew from its jobs' decisions, or forgotten (a job
    that may not be remembered ahead of the blocking head, or no such head). Those behind it that may not be
    remembered stay outside, arrivals next pass."""
    touched = {job.request.queue for job, _ in decided.values() if job.request is not None}
    touched |= {old.request.queue for key in decided if (old := memo.jobs.get(key)) is not None and old.request}
    for queue in touched:
        old_line = memo.lines.pop(queue, None)
        for key in old_line.members if old_line is not None else ():
            memo.jobs.pop(key, None)  # still here: put back below when it may be remembered
    by_queue: dict[str, list[str]] = {}
    outside: dict[str, list[JobObject]] = {}  # queue -> its jobs that may not be remembered
    for key, (job, keep) in decided.items():
        memo.jobs.pop(key, None)
        if job.request is None or job.request.queue not in touched:
            continue
        if keep:
            memo.jobs[key] = job
            by_queue.setdefault(job.request.queue, []).append(key)
        else:
            outside.setdefault(job.request.queue, []).append(job)
    heads: dict[str, Wait] = {}
    for decision in decisions:
        if isinstance(decision, Wait) and decision.queue not in heads and blocks(decision):
            heads[decision.queue] = decision
    for queue, members in by_queue.items():
        head = heads.get(queue)
        head_job = decided[head.job_id][0] if head is not None and head.job_id in decided else None
        request = head_job.request if head_job is not None else None
        at = line_position(head_job, request) if head_job is not None and request is not None else None
        if queue in outside and not (
            head is not None
            and at is not None
            and decided[head.job_id][1]
            and all(not job.deleting and stands_behind_at(at, job) for job in outside[queue])
        ):
            for key in members:
                memo.jobs.pop(key, None)
            continue
        shape = request.spec if request is not None else None
        reason = head.reason if head is not None else None
        facts = queue_facts(queues.get(queue))
        key = head.job_id if head is not None else ""
        oldest = earliest(decided[member][0].queued_at for member in members)
        name = head_job.name if head_job is not None else ""
        memo.lines[queue] = LineMemo(
            frozenset(members), facts, in_use.get(queue, 0), reason, shape, key, oldest, name, at
        )


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

"""Strict FIFO admission line by line, with the waiting memo: which queue lines a pass must look at.

Each line goes through the core FIFO pass in queue order (:func:`admit_lines`), but a line the memo holds
(``waiting.py``) is looked at only as far as :func:`look` says: not at all while nothing its verdicts rest on
moved, its head alone when GPUs came free that might hold it, whole otherwise. A line left out still has its
arrivals decided, behind its remembered blocking head, and its deferred arrivals as far as the runtime has
room for their first status write (:func:`within_room`). Which lines are candidates is the triage's
(``waiting.py``); what the memo keeps afterwards is ``waiting_remember.py``'s.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.admit.admission import Admit, Wait
from paralleljob.core.admit.fifo import free_groups
from paralleljob.core.admit.gates import WaitReason
from paralleljob.core.cluster import ClusterState
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.plan.admission.fifo_admission import line_position
from paralleljob.k8s.plan.admission.waiting import (
    LineMemo,
    QueueFacts,
    Triage,
    WaitingMemo,
    blocks,
    figures,
    queue_facts,
    stands_behind,
)

Entry = tuple[JobObject, JobRequest]
# the core FIFO pass over some entries, with the lines a head decided earlier holds (queue -> the head's name)
Admitter = Callable[[Sequence[Entry], Mapping[str, str]], tuple[list[float], Sequence[Admit | Wait]]]


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
    facts = queue_facts(info)
    if line.facts != facts or (line.in_use != in_use and caps_gpus(facts)):
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


def caps_gpus(facts: QueueFacts) -> bool:
    """Whether a queue caps its GPUs (``maxGPUs``): only then do the GPUs its jobs hold decide a verdict (its
    cap's refusal, an elastic job's room); an uncapped line whose running jobs come and go stays as it was
    (in a flood each finish would otherwise send its whole line through the pass again)."""
    return facts is not None and facts[0] is not None


def outside_head(line: LineMemo, entries: Sequence[Entry]) -> tuple[Entry | None, list[Entry]]:
    """A line whose blocking head waits outside it (its own status write landing, ``waiting_remember``): the
    head's entry among the pass's, and the others. None for the head when it is not among them (deleted, in
    another queue, trying no admission) or no longer stands where the line remembers it."""
    for i, (job, request) in enumerate(entries):
        if job.key == line.head_key:
            if line_position(job, request) != line.head_at:
                return None, list(entries)
            return entries[i], [*entries[:i], *entries[i + 1 :]]
    return None, list(entries)


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


@dataclass(frozen=True, slots=True)
class LinesPass:
    """What one pass brings to its FIFO lines: ``queued``, the entries it decided to try (their lines are
    always looked at); ``facts``, a queue's object and the GPUs its jobs hold now; ``state``, the view's (None:
    no GPU nodes); ``decide_job``, the pass's per-job decision (None: the job does not try admission);
    ``admit``, the core FIFO pass over some entries of one line; ``room``, how many deferred arrivals of the
    lines left out a first status write can start for now (None: all); ``asks_room``, whether the pass would
    ask the move planner for a line's blocked head (``moves/roommaking``): such a head is looked at, as a
    pass without the memo would."""

    queued: Sequence[Entry]
    facts: Callable[[str], tuple[QueueInfo | None, int]]
    state: ClusterState | None
    decide_job: Callable[[JobObject], Entry | None]
    admit: Admitter
    room: int | None = None
    asks_room: Callable[[JobObject], bool] = lambda head: False


def admit_lines(memo: WaitingMemo | None, sorted_out: Triage, this_pass: LinesPass) -> Lines:
    """The FIFO pass line by line in queue order (as the core orders them, so the result is the same as one
    call over all): ``this_pass.queued`` lines always, the triage's ``quiet`` candidates as :func:`look` says.
    A quiet line's entries in ``queued`` are its arrivals (triage): when they all stand behind a head that still
    blocks, only they are decided, behind it, in one call with the other such lines' after the rest (they
    allocate nothing, so where they are decided changes nothing); else the whole line is. The triage's
    ``deferred``: the quiet lines' arrivals it left undecided (they stand behind the remembered head): decided
    with their line when it is looked at, else only ``room`` of them, those whose first status write can
    start this pass (:func:`within_room`); the others are :attr:`Lines.skipped`, decided by a later pass."""
    queued, quiet, deferred = this_pass.queued, sorted_out.quiet, sorted_out.deferred
    facts, state, decide_job, admit = this_pass.facts, this_pass.state, this_pass.decide_job, this_pass.admit
    by_queue: dict[str, list[Entry]] = {}
    for entry in queued:
        by_queue.setdefault(entry[1].queue, []).append(entry)
    freed = capacity_freed(memo, state) if memo is not None and quiet else False
    out = Lines()
    behind: list[Entry] = []
    heads: dict[str, str] = {}
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
            head_entry: Entry | None = None
            if line.head_key and line.head_key not in line.members:
                head_entry, entries = outside_head(line, entries)
                if head_entry is None:
                    verdict = Look.ALL  # its head left, moved in line or tries no admission: decided whole
            if not behind_head(line, entries):
                verdict = Look.ALL  # an arrival sorts ahead of the head, or no head blocks the line
            if head_entry is not None:
                if verdict is Look.ALL:
                    entries = [head_entry, *entries]
                else:  # its head waits outside it: decided first, every pass; the rest only if it gets in
                    decisions = run([head_entry], {})
                    still = any(isinstance(d, Wait) and blocks(d) for d in decisions)
                    verdict = Look.NOTHING if still else Look.ALL
            head = next((job for job in members if job.key == line.head_key), None)
            if verdict is Look.NOTHING and head is not None and this_pass.asks_room(head):
                verdict = Look.HEAD  # the planner would be asked for it: decided, so it is asked
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
    chosen, skipped = within_room(pool, this_pass.room)
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

"""What a pass leaves in the waiting memo (``waiting.py``) once it has decided: the queue lines it may
leave out next time, with the facts their verdicts rest on (:func:`remember`), and the running and finished
jobs that had nothing to do (:func:`remember_running`).

A line is remembered only when every job ahead of its blocking head may be (Queued, nothing to write,
nothing outside its object deciding its fate), and the head too, or the head stays Queued with only a write
of its own to make: it then waits outside the line, decided first every pass, and joins it once written. A
standing line (left out this pass) takes in the arrivals that may be remembered, and forgets itself when a
job of it other than its head has something to write.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from paralleljob.core.admit.admission import Admit, Wait
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.admission.fifo_admission import line_position
from paralleljob.k8s.plan.admission.waiting import (
    Done,
    LineMemo,
    Steady,
    WaitingMemo,
    blocks,
    earliest,
    pod_ids,
    queue_facts,
    stands_behind_at,
)
from paralleljob.k8s.plan.admission.waiting_lines import Lines
from paralleljob.k8s.plan.kinds.picker import kind_of
from paralleljob.k8s.plan.ttl import deadline


def remember_running(
    memo: WaitingMemo,
    decided: Iterable[JobActions],
    pods_of: Callable[[JobObject], Sequence[PodInfo]],
    untouchable: Collection[str],
    finished: Iterable[Done] = (),
) -> None:
    """Keep the running jobs that need nothing while nothing of theirs changes: Running before and after,
    nothing to write, never repaired nor placed above its ideal cost (such a job is re-priced against the free
    GPUs now and then, ``core.reoptimize.move_back_candidate``), no
    preemption under way (its deadline is a time), not a pod group (its pods are decided elsewhere), and not
    held back or busy. A node that changes clears the memo (``decide``): health is read from the nodes.
    Finished jobs likewise (Succeeded or Failed before and after, nothing to do, not being deleted): those the
    triage left out (``finished``) stay kept; they are what a queue that drains piles up. One with a
    ``ttlSecondsAfterFinished`` still to run is kept until its deadline (``ttl.deadline``; see ``waiting.triage``)."""
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
            and not actions.move_back_candidate  # placed dear too: re-priced on a schedule (core.reoptimize)
            and job.request is not None
            and kind_of(job.request).renders_pods  # a pod group's pods are decided elsewhere
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


def remember(
    memo: WaitingMemo,
    decided: Mapping[str, tuple[JobObject, bool]],
    lines: Lines,
    queues: Mapping[str, QueueInfo],
    in_use: Mapping[str, int],
    may_wait_outside: Collection[str] = frozenset(),
) -> None:
    """After a pass: ``decided`` maps each job of the lines it looked at to (the object, whether it may be
    remembered: it ended Queued with nothing to write); ``lines`` are the pass's (the core FIFO pass's
    decisions, in order, and the standing lines); the caller records the GPUs' owners (``WaitingMemo.owner``).
    A line is remembered only when all its jobs are (its blocking head aside, below), but a standing line (its
    remembered head still holds it) keeps what it was and takes in the arrivals that may be remembered; the
    others are decided again next pass, as arrivals. A blocking head whose only fault is a status write of its
    own (``may_wait_outside``: it stays Queued, of a kind the memo may hold) does not make the memo forget its
    line: it waits outside the line, decided first every pass (``waiting_lines.outside_head``), and joins it
    once it has nothing to write."""
    decisions, standing = lines.decisions, lines.standing
    waits = {decision.job_id: decision for decision in decisions if isinstance(decision, Wait)}
    grown: dict[str, list[tuple[str, JobObject, bool]]] = {}
    others: dict[str, tuple[JobObject, bool]] = {}
    for key, (job, keep) in decided.items():
        queue = job.request.queue if job.request is not None else None
        if queue is not None and queue in standing and queue in memo.lines:
            grown.setdefault(queue, []).append((key, job, keep))
        else:
            others[key] = (job, keep)
    for queue, jobs in grown.items():
        _grow(memo, queue, jobs, may_wait_outside, waits)
    _rebuild(memo, others, decisions, queues, in_use, may_wait_outside)


def _grow(
    memo: WaitingMemo,
    queue: str,
    jobs: Sequence[tuple[str, JobObject, bool]],
    may_wait_outside: Collection[str],
    waits: Mapping[str, Wait],
) -> None:
    """A standing line after its arrivals (and maybe its head) were decided: the arrivals with nothing to
    write join it; one still being written waits outside it (decided again next pass, behind the head). A head
    with something to write of its own (its message changed) waits outside it too, still blocking it; any
    other member with something to write forgets the line: the next pass decides it whole."""
    line = memo.lines[queue]
    head_key = line.head_key
    writing = [key for key, _, keep in jobs if not keep and key in line.members]
    decision = waits.get(head_key)
    if writing:
        if writing != [head_key] or head_key not in may_wait_outside or decision is None or not blocks(decision):
            del memo.lines[queue]
            for key in line.members:
                memo.jobs.pop(key, None)
            return
        memo.jobs.pop(head_key, None)
        line = replace(line, members=line.members - {head_key}, oldest=line.oldest_behind)
    head = next((job for key, job, _ in jobs if key == head_key), None)
    if head is not None and head.request is not None and decision is not None and blocks(decision):
        line = replace(line, head_reason=decision.reason, head=head.request.spec)  # as it waits now
    joined = [(key, job) for key, job, keep in jobs if keep and key not in line.members]
    for key, job in joined:
        memo.jobs[key] = job
    if joined:
        behind = [job.queued_at for key, job in joined if key != head_key]  # a head back from outside is not
        line = replace(
            line,
            members=line.members | {key for key, _ in joined},
            oldest=earliest([line.oldest, *(job.queued_at for _, job in joined)]),
            oldest_behind=earliest([line.oldest_behind, *behind]),
        )
    memo.lines[queue] = line


def _rebuild(
    memo: WaitingMemo,
    decided: Mapping[str, tuple[JobObject, bool]],
    decisions: Sequence[Admit | Wait],
    queues: Mapping[str, QueueInfo],
    in_use: Mapping[str, int],
    may_wait_outside: Collection[str],
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
            and (decided[head.job_id][1] or head.job_id in may_wait_outside)  # else it holds nothing still
            and all(
                not job.deleting and stands_behind_at(at, job) for job in outside[queue] if job.key != head.job_id
            )
        ):
            for key in members:
                memo.jobs.pop(key, None)
            continue
        shape = request.spec if request is not None else None
        reason = head.reason if head is not None else None
        facts = queue_facts(queues.get(queue))
        key = head.job_id if head is not None else ""
        behind = earliest(decided[member][0].queued_at for member in members if member != key)
        oldest = earliest([behind, head_job.queued_at]) if head_job is not None and key in members else behind
        name = head_job.name if head_job is not None else ""
        memo.lines[queue] = LineMemo(
            frozenset(members), facts, in_use.get(queue, 0), reason, shape, key, oldest, name, at, behind
        )

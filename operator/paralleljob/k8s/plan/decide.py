"""One reconcile pass: the observed objects and the kept cluster view in, a :class:`Plan` out.

Every ParallelJob is compared with its recorded placement and the pods that exist (``jobdecision.py``);
running jobs are checked for broken hardware and crashed workers first (repairs go before new admissions),
preemptions whose grace period ended are finished, then queued jobs are admitted on what is left: by the
operator's strict FIFO per queue (no policy), or by the core's queueing pass (fair share, backfill,
preemption). Nothing here talks to the API; the executor carries the plan out, status first. A job whose
decision raises is reported and skipped, so one bad object never stops the rest.

The pass is not a pure function of its inputs: it allocates and releases GPUs in the view's state as it
decides (the reconciler takes those trial allocations back after the pass), and it updates the waiting memo
it is handed (``waiting.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core import elastic as elastic_rules
from paralleljob.core.admit.queueing import QueuePolicy, RunningJob
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.placer import OPERATOR_PLACER, Placer
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.dra import ClaimInfo
from paralleljob.k8s.edge.parse.nativegroups import NativeGroup, WorkloadInfo
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_time, preemption_of, running_job
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.render.computedomain import DomainInfo
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.actions import ACTIVE, JobActions, Plan
from paralleljob.k8s.plan.admission.eligibility import Eligibility
from paralleljob.k8s.plan.admission.policy_admission import admit_with_core
from paralleljob.k8s.plan.admission.waiting import WAITING, Triage, WaitingMemo, earliest, pod_ids, triage
from paralleljob.k8s.plan.admission.waiting_lines import LinesPass, admit_lines
from paralleljob.k8s.plan.admission.waiting_remember import remember, remember_running
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.backoff import Backoff
from paralleljob.k8s.plan.groups.podgroups import GroupRequests, by_group
from paralleljob.k8s.plan.jobdecision import decide_job
from paralleljob.k8s.plan.kinds.picker import at_current_size, kind_of, sizing_of
from paralleljob.k8s.plan.kinds.resizing import note_membership, rigid_waiting
from paralleljob.k8s.plan.lazy import Lazy
from paralleljob.k8s.plan.metrics_model import queue_book, queue_statuses
from paralleljob.k8s.plan.moves.preempting import making_room, pending_deadlines
from paralleljob.k8s.plan.moves.roommaking import RoomMaking
from paralleljob.k8s.plan.nodenotes import node_warnings
from paralleljob.k8s.plan.pods.computedomains import stale_domains
from paralleljob.k8s.plan.pods.podowners import adopted_pods, worker_pods
from paralleljob.k8s.plan.pods.podsync import gpu_holders, is_ending
from paralleljob.k8s.plan.slices.admission import admit_slices, admit_with_slices, asks_for_slices, split
from paralleljob.k8s.plan.slices.poolbook import held_at_start
from paralleljob.k8s.plan.status import StatusDraft
from paralleljob.k8s.plan.ttl import expire
from paralleljob.k8s.view.clusterview import Claim, ClusterView, build_view


@dataclass(frozen=True)
class Observed:
    jobs: Sequence[JobObject]
    pods: Sequence[PodInfo]
    nodes: Sequence[NodeInfo]
    now: str
    queues: Mapping[str, QueueInfo] = field(default_factory=dict)
    bind_failures: Mapping[str, str] = field(default_factory=dict)  # job key -> why its gang could not be bound
    # job key -> a write met transient API trouble (the job waits half a second before it is tried again)
    api_trouble: Mapping[str, str] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=Backoff)  # the waits the previous pass handed back (``Plan.backoff``)
    invalid_pods: Mapping[str, str] = field(default_factory=dict)  # job key -> the API refused its pods as invalid
    # Jobs whose previous decisions are still being carried out: left alone this pass. The value is the
    # placement being written (it holds its GPUs already), or None to keep the stored one.
    busy: Mapping[str, PlacementRecord | None] = field(default_factory=dict)
    now_s: float | None = None  # ``now`` as epoch seconds (finer than the stamp); parsed from it when absent
    # The namespaces this operator serves (empty: all). A labelled pod elsewhere belongs to a ParallelJob this
    # operator cannot see, not to a deleted one, so it must never be taken for an orphan.
    namespaces: tuple[str, ...] = ()
    # Nodes whose parsed value changed since the last pass (None: deleted), and the warnings already
    # reported about nodes (``Plan.node_warnings`` of the previous pass).
    changed_nodes: Mapping[str, NodeInfo | None] = field(default_factory=dict)
    node_warnings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Kubernetes' own gang API (edge/parse/nativegroups.py): PodGroups and Workloads by namespace/name.
    pod_groups: Mapping[str, NativeGroup] = field(default_factory=dict)
    workloads: Mapping[str, WorkloadInfo] = field(default_factory=dict)
    # ResourceClaims by namespace/name (watched with DRA on): a PodGroup's shared claims (plan/groups/groupclaims.py)
    resource_claims: Mapping[str, ClaimInfo] = field(default_factory=dict)
    # How many more status-only chains the runtime would start now (OperatorConfig.background_chains less those
    # in flight); None: no limit. New jobs behind a blocked head beyond it are not decided (plan/admission/waiting.py).
    background_room: int | None = None
    # job key -> when this operator last wrote its waiting message (epoch seconds), and how long such a
    # message stands for a wait that only restates it with other figures (0: rewritten every time)
    message_written: Mapping[str, float] = field(default_factory=dict)
    message_refresh_s: float = 0.0
    # (job key, placement epoch) -> when this operator last re-priced the job there for a move back (epoch
    # seconds): the status is written only when the verdict changes, so its stamp alone would let a job be
    # re-priced every pass; a job that moved since is priced afresh
    repriced_at: Mapping[tuple[str, int], float] = field(default_factory=dict)
    # A job's time to checkpoint before a preemption or a drain moves it (--preemption-grace-seconds).
    checkpoint_grace_s: float = 30.0
    compute_domains: Sequence[DomainInfo] = ()  # ours, watched by our label (plan/pods/computedomains.py)

    @property
    def seconds(self) -> float:
        return self.now_s if self.now_s is not None else (parse_time(self.now) or 0.0)


def claims_of(
    jobs: Sequence[JobObject],
    busy: Mapping[str, PlacementRecord | None] | None = None,
    releasing: Collection[str] = (),
) -> list[Claim]:
    """Recorded placements that hold GPUs, oldest claim first; a placement being written counts already,
    and one a job is giving up (``releasing``: its finished, failed or requeued status is being written)
    no longer does: the pass that decided so gave its GPUs to others already, and holding them for the
    write's round trip made the view see two claims on them and rebuild itself on every pass."""
    busy = busy or {}
    claims: list[tuple[str, Claim]] = []
    for job in jobs:
        if job.key in releasing:
            continue
        record = busy.get(job.key) or (job.record if holds_gpus(job) else None)
        if record is not None:
            claims.append((job.status.start_time or job.queued_at, Claim(job.key, job.uid, record)))
    claims.sort(key=lambda item: (item[0], item[1].key))
    return [claim for _, claim in claims]


def holds_gpus(job: JobObject) -> bool:
    """Whether a job's recorded placement holds its GPUs (when no chain of its is in flight): active and not
    being deleted. Only such jobs and busy ones can make a claim (the reconciler keeps the set)."""
    return job.record is not None and job.phase in ACTIVE and not job.deleting




def decide(
    observed: Observed,
    topology: TopologyConfig,
    strict_fifo: bool = True,
    clock: Callable[[], float] | None = None,
    policy: QueuePolicy | None = None,
    view: ClusterView | None = None,
    memo: WaitingMemo | None = None,
) -> tuple[Plan, ClusterView]:
    """``policy`` None: strict (or best-effort) FIFO per queue; else the core's queueing pass with it.
    ``view``: the cluster as of ``observed`` (the reconciler's kept one); built from ``observed`` when None.
    The pass changes the view's state as it decides (allocations, releases). ``memo``: what earlier passes
    decided for waiting jobs (``plan/admission/waiting.py``), kept by the caller; with strict FIFO, lines nothing
    touched are left out. The pass updates it."""
    # A placed elastic job is decided at the replicas it runs with, not the size it asks for.
    observed = dataclasses.replace(observed, jobs=[at_current_size(j) for j in observed.jobs])
    now_s = observed.seconds
    jobs = {j.key: j for j in observed.jobs}
    if view is None:
        view = build_view(observed.nodes, observed.pods, claims_of(observed.jobs, observed.busy), topology)
    groups = by_group(observed.pods)
    plan = Plan(warnings=list(view.warnings))
    plan.node_warnings, plan.node_events = node_warnings(observed.node_warnings, observed.changed_nodes)
    backoff = observed.backoff.after(observed.bind_failures, observed.api_trouble, now_s)
    book = _Book(worker_pods(observed.pods, jobs, view.nodes, observed.namespaces, plan))
    book.pods.update(adopted_pods(jobs, groups, observed.namespaces, observed.pod_groups, observed.workloads, plan))
    ctx = PassContext(
        view=view,
        placer=Placer(view.state, OPERATOR_PLACER),
        eligibility=Eligibility(
            view, observed.pods, GroupRequests(jobs, groups, observed.pod_groups, observed.resource_claims)
        ),
        now=observed.now,
        now_s=now_s,
        clock=clock or (lambda: 0.0),
        actions_for=book.actions_for,
        pods_of=book.pods_of,
        queues=observed.queues,
        jobs=jobs,
        holds=backoff.active(now_s),
        bind_failures=observed.bind_failures,
        invalid_pods=observed.invalid_pods,
        gpu_holders=Lazy(functools.partial(gpu_holders, observed.pods, view.nodes)),
        pool_held=Lazy(functools.partial(held_at_start, observed.pods, view)),
        rigid_waiting=functools.cache(functools.partial(rigid_waiting, observed.jobs)),
        pod_groups=observed.pod_groups,
        resource_claims=observed.resource_claims,
        message_written=observed.message_written,
        message_refresh_s=observed.message_refresh_s,
        repriced_at=observed.repriced_at,
        checkpoint_grace_s=observed.checkpoint_grace_s,
    )
    if memo is not None and (policy is not None or not strict_fifo or observed.changed_nodes):
        memo.clear()  # only strict FIFO leaves lines out; a node that changed may change any verdict
    untouchable = {*observed.busy, *ctx.holds, *observed.bind_failures, *observed.api_trouble, *observed.invalid_pods}
    defer = observed.background_room is not None
    sorted_out = triage(memo, observed.jobs, frozenset(untouchable), book.pods_of, now_s, defer)
    plan.quiet_finished, plan.quiet_wake_at = sorted_out.finished_by_phase, sorted_out.wake_at
    line = _decide_jobs(ctx, observed, plan, book, _Memo(memo, sorted_out, untouchable))
    try:
        _admit(ctx, plan, line, policy, strict_fifo, observed)
    except Exception as exc:
        plan.warnings.append(f"admission failed: {exc!r}")
    # In the order jobs are decided in (active first, then by queue time), whatever the memo left out: which
    # lines a pass looked at, and when, must not change the order the decisions are carried out in (a
    # property test found a queue's binds ahead of another's with the memo and behind them without it).
    plan.jobs = sorted(book.actions.values(), key=lambda a: (a.job.phase not in ACTIVE, a.job.queued_at, a.job.key))
    for actions in plan.jobs:
        note_membership(actions)
        expire(actions, now_s)  # a finished job whose TTL ran out is deleted; one still to run wakes the loop then
    for actions in plan.jobs:
        if actions.job.request is not None:
            active = actions.draft.phase in ACTIVE and not actions.job.deleting
            kind = kind_of(actions.job.request, actions.job.key in ctx.pod_groups)
            kind.finish(ctx, actions, book.pods_of(actions.job), active)
    plan.backoff = backoff.settle(now_s, jobs, {a.job.key for a in plan.jobs if a.gang_bound})
    plan.domain_deletes = stale_domains(observed.compute_domains, jobs, book.pods, view.nodes, observed.busy, plan.jobs)
    _wake_and_queues(plan, observed, view)
    return plan, view


@dataclass
class _Book:
    """The pass's own bookkeeping: each job's pods and actions. ``scratch``: waiting jobs whose last
    decisions are still being written, decided again on drafts nobody carries out, so nothing is written
    twice."""

    pods: dict[str, list[PodInfo]]
    actions: dict[str, JobActions] = field(default_factory=dict)
    scratch: dict[str, JobActions] = field(default_factory=dict)

    def actions_for(self, job: JobObject) -> JobActions:
        if job.key in self.scratch:
            return self.scratch[job.key]
        if job.key not in self.actions:
            self.actions[job.key] = _fresh(job)
        return self.actions[job.key]

    def pods_of(self, job: JobObject) -> list[PodInfo]:
        return self.pods.get(job.key, [])


def _fresh(job: JobObject) -> JobActions:
    return JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))


@dataclass
class _Memo:
    """The waiting memo's part in this pass: the memo (None: off), the triage of jobs into those to decide
    and the quiet lines left out, and the jobs whose fate something outside their object decides."""

    memo: WaitingMemo | None
    sorted_out: Triage
    untouchable: set[str]

    def steady(self, job: JobObject, pods: Sequence[PodInfo], resizes: bool) -> JobActions | None:
        """Last pass's (empty) decisions for a job running as it was, nothing of it changed. A job that
        ``resizes`` (elastic) is always decided: GPUs freed anywhere may let it grow."""
        if self.memo is None or resizes:
            return None
        steady = self.memo.running.get(job.key)
        if steady is None or steady.job is not job or steady.pods != pod_ids(pods) or job.key in self.untouchable:
            return None
        return steady.actions


@dataclass
class _Line:
    """What admission starts from once every job is decided: who waits (in order), who holds GPUs (and
    whether it may be preempted), and the GPUs each queue holds."""

    memo: _Memo
    book: _Book
    order: list[JobObject] = field(default_factory=list)
    queued: list[tuple[JobObject, JobRequest]] = field(default_factory=list)
    held: list[tuple[JobObject, JobRequest, bool]] = field(default_factory=list)
    in_use: dict[str, int] = field(default_factory=dict)

    def hold(self, job: JobObject, request: JobRequest, preemptible: bool) -> None:
        self.in_use[request.queue] = self.in_use.get(request.queue, 0) + request.spec.num_gpus
        self.held.append((job, request, preemptible))


def _decide_jobs(ctx: PassContext, observed: Observed, plan: Plan, book: _Book, memo: _Memo) -> _Line:
    """Every job but admission, oldest active first: repairs, completions, preemptions, deletions; quiet
    waiting lines (the memo's triage) are left to admission."""
    order = sorted(memo.sorted_out.to_decide, key=lambda j: (j.phase not in ACTIVE, j.queued_at, j.key))
    line = _Line(memo, book, order)
    for job in line.order:
        if job.key in observed.busy:
            # counted at its last written phase (gauges, queue status), whatever is decided below
            plan.busy.append(_fresh(job))
            if job.request is not None and (observed.busy[job.key] is not None or job.phase in ACTIVE):
                line.hold(job, job.request, False)
                continue
            # A waiting job whose status write is in flight (its reason changed as a deletion freed room, say)
            # keeps its place in line: left out, it let the jobs behind it take the room it was waiting for.
            # Decided as usual on a draft that is thrown away: a head that does not fit blocks its queue, one
            # that fits keeps its GPUs in this pass's trial state; the next pass decides it for real.
            book.scratch[job.key] = _fresh(job)
            try:
                entry = decide_job(ctx, book.scratch[job.key], job)
            except Exception:  # reported by the pass that decides it for real, once its write has landed
                continue
            if entry is not None:
                line.queued.append(entry)
            continue
        resizes = job.request is not None and sizing_of(job.request).resizes
        steady = memo.steady(job, book.pods_of(job), resizes)
        if steady is not None:
            book.actions[job.key] = steady
            if job.request is not None:
                line.hold(job, job.request, preemption_of(steady.draft.data) is None)
            continue
        actions = book.actions_for(job)
        try:
            entry = decide_job(ctx, actions, job)
        except Exception as exc:  # one bad object must not stop the others, and its status says why
            plan.warnings.append(f"could not reconcile {job.key}: {exc!r}")
            broken = _fresh(job)
            why = f"the operator could not handle this object: {exc!r}"
            broken.draft.condition("ReconcileError", "True", "InternalError", why, ctx.now)
            book.actions[job.key] = broken
            continue
        if entry is not None:
            line.queued.append(entry)
        elif job.request is not None and actions.draft.phase in ACTIVE:
            preemptible = actions.draft.phase is Phase.RUNNING and preemption_of(actions.draft.data) is None
            line.hold(job, job.request, preemptible)
            if (
                sizing_of(job.request).resizes
                and job.record is not None
                and elastic_rules.offers_growth_replicas(
                    running=actions.draft.phase is Phase.RUNNING,
                    being_preempted=preemption_of(actions.draft.data) is not None,
                    resized_this_pass=actions.draft.data.get("placement") != job.status.raw.get("placement"),
                    preemptible=job.request.preemptible,
                )
                and not is_ending(actions)
            ):
                ctx.shrinkable[job.key] = HeldJob(actions, job, job.request, job.record, book.pods_of(job))
    return line


def _admit(
    ctx: PassContext, plan: Plan, line: _Line, policy: QueuePolicy | None, strict_fifo: bool, observed: Observed
) -> None:
    if policy is None:
        _admit_fifo(ctx, plan, line, strict_fifo, observed)
        return
    # a slice job holds no GPU of its own in the state (its GPU is shared): preempting it would free nothing
    held = [(job, request, ok and not asks_for_slices(request)) for job, request, ok in line.held]
    running: dict[str, RunningJob] = {
        job.key: running_job(job, request, ctx.now_s, preemptible) for job, request, preemptible in held
    }
    room = making_room(observed.jobs)
    whole, sliced = split(line.queued)
    plan.scheduling_seconds, core_plan = admit_with_core(ctx, whole, held, running, policy, room)
    if core_plan is not None:
        plan.fairness = core_plan.jain_index
    admit_slices(ctx, sliced, line.in_use, {}, strict=False)  # the queueing pass has no blocked lines


def _admit_fifo(ctx: PassContext, plan: Plan, line: _Line, strict_fifo: bool, observed: Observed) -> None:
    """The per-queue FIFO over the lines the memo did not leave out. It honours the rollback holds too: a job
    whose gang was refused waits out its back-off (condition BackingOff) instead of being placed again on the
    very next pass."""
    memo, book = line.memo.memo, line.book
    # moves that free an NVLink clique for a waiting tray job (plan/moves/roommaking.py): the plan in flight goes
    # first (its job may be admitted now), its nodes take nothing else while the lines are admitted
    room = RoomMaking(ctx, line.memo.untouchable)
    queued = room.before(line.queued)
    owner_before = list(ctx.view.state.owner)
    this_pass = LinesPass(
        queued,
        lambda queue: (observed.queues.get(queue), line.in_use.get(queue, 0)),
        ctx.view.state,
        lambda job: decide_job(ctx, book.actions_for(job), job),
        lambda entries, blocked: admit_with_slices(ctx, entries, line.in_use, strict_fifo, blocked),
        observed.background_room,
        room.would_ask,
    )
    with room.holding():
        lines = admit_lines(memo, line.memo.sorted_out, this_pass)
    decided_keys = {job.key for job in lines.decided}
    heads = [memo.lines[queue].head_key for queue in lines.left_out] if memo is not None else []
    decided_keys |= {job.key for job, _ in queued}  # a head waiting outside its line was decided with these
    quiet_heads = [ctx.jobs[head] for head in heads if head in ctx.jobs and head not in decided_keys]
    room.after([*queued, *((job, job.request) for job in lines.decided if job.request is not None)], quiet_heads)
    plan.scheduling_seconds = lines.durations
    plan.quiet_waiting = {queue: len(jobs) for queue, jobs in lines.left_out.items()}
    plan.skipped_pending = {queue: len(jobs) for queue, jobs in lines.skipped.items()}
    plan.behind_heads = lines.behind
    if memo is not None:  # a line left out is the one the memo holds (less its head, when the head was looked at)
        plan.quiet_oldest = {
            queue: oldest
            for queue, jobs in lines.left_out.items()
            if jobs and (oldest := _left_oldest(memo, queue, jobs))
        }
        for queue, jobs in lines.skipped.items():  # in line too (by priority a new one may have waited longer)
            if oldest := earliest([plan.quiet_oldest.get(queue, ""), *(job.queued_at for job in jobs)]):
                plan.quiet_oldest[queue] = oldest
    if memo is not None and strict_fifo:
        decided, outside = _rememberable([*line.order, *lines.decided], book.actions, line.memo.untouchable, memo)
        remember(memo, decided, lines, observed.queues, line.in_use, outside)
        memo.owner = owner_before  # the GPUs' owners the next pass compares with (waiting_lines.capacity_freed)
        remember_running(
            memo, book.actions.values(), book.pods_of, line.memo.untouchable, line.memo.sorted_out.finished
        )


def _left_oldest(memo: WaitingMemo, queue: str, left_out: Sequence[JobObject]) -> str:
    """The earliest ``queuedAt`` among a line's jobs left out, read when the memo kept the line: all of them,
    or all but the head when the pass decided the head alone (it counts from its own decision then: admitted,
    it waits no more)."""
    line = memo.lines[queue]
    return line.oldest if len(left_out) == len(line.members) else line.oldest_behind


def _wake_and_queues(plan: Plan, observed: Observed, view: ClusterView) -> None:
    """When the loop must pass again regardless (a grace period, a back-off, a pod group's timeout ends),
    and the queues' lengths and the statuses that changed."""
    now_s = observed.seconds
    deadlines = pending_deadlines(plan.jobs) + [a.wake_at for a in plan.jobs if a.wake_at is not None]
    if plan.quiet_wake_at is not None:  # a finished job left out whose TTL ends then
        deadlines.append(plan.quiet_wake_at)
    backoff_ends = plan.backoff.next_end()
    if backoff_ends is not None:  # a held job is tried again when its wait ends, not at the next resync
        deadlines.append(backoff_ends)
    if deadlines:
        plan.wake_after = max(0.0, min(deadlines) - now_s)
    plan.queue_lengths = dict(plan.quiet_waiting)
    for queue, count in plan.skipped_pending.items():  # Pending, but in line all the same
        plan.queue_lengths[queue] = plan.queue_lengths.get(queue, 0) + count
    for actions in plan.seen():
        if actions.draft.phase is Phase.QUEUED and actions.job.request is not None:
            queue = actions.job.request.queue
            plan.queue_lengths[queue] = plan.queue_lengths.get(queue, 0) + 1
    plan.queue_book = queue_book(view, plan.seen(), observed.queues)  # read again by the gauges
    plan.queue_statuses = {
        name: status
        for name, status in queue_statuses(
            plan.seen(), observed.queues, view, plan.waiting_left_out(), plan.queue_book
        ).items()
        if name in observed.queues and dict(observed.queues[name].status) != status
    }


def _rememberable(
    decided: Sequence[JobObject],
    actions_by_key: Mapping[str, JobActions],
    untouchable: set[str],
    memo: WaitingMemo,
) -> tuple[dict[str, tuple[JobObject, bool]], set[str]]:
    """Each job of a line this pass decided (waiting, or kept by the memo until now), and whether the memo may
    keep it: it ended Queued with nothing to write, and nothing outside its object (a hold, a busy chain, its
    pod group's pods) decides its fate. Also those it may not keep that may still stand as their line's
    blocking head outside it (Queued, of a kind the memo holds, kept out only by a write, a busy chain or a
    hold of their own): decided every pass while they stand there (``waiting_remember.remember``)."""
    out: dict[str, tuple[JobObject, bool]] = {}
    outside: set[str] = set()
    for job in decided:
        actions = actions_by_key.get(job.key)
        if job.phase not in WAITING and job.key not in memo.jobs and not job.deleting:
            continue
        holdable = (
            actions is not None
            and actions.draft.phase is Phase.QUEUED
            and job.request is not None
            and kind_of(job.request).renders_pods  # a pod group's fate is its pods', which another controller makes
            and not asks_for_slices(job.request)  # a slice freed on a GPU still sliced changes no owner the memo sees
        )
        keep = holdable and actions is not None and not actions.has_work and job.key not in untouchable
        out[job.key] = (job, keep)
        if holdable and not keep and not job.deleting:
            outside.add(job.key)
    return out, outside

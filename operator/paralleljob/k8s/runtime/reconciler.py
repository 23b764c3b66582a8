"""The reconcile loop: watch events and timers wake it, each pass decides on a consistent snapshot of the
stores and executes the plan, and another pass follows at once while there is work in flight.

Passes never overlap, so one pass's allocations are always visible to the next. The first pass waits until
every kind's reflector has listed it once (a placement made on a partial view could take GPUs that an
unlisted job holds); a pass also runs every ``resync_seconds`` with nothing changed (level-triggered), and
each reflector lists its kind again every ``relist_seconds`` to repair anything a watch may have missed.

The cluster view is kept between passes (``liveview.py``: patched with what the stores say changed, rebuilt
after a re-list, checked against a rebuild now and then by ``viewcheck.py``). A pass decides on it as a
trial and takes its tentative allocations back at the end: what it decided reaches the next view through
the API objects (a written placement is a claim), exactly as it would after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from paralleljob.core.reoptimize import RECHECK_SECONDS
from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.edge.constants import JOB_LABEL, POD_GROUP_LABEL, object_key
from paralleljob.k8s.edge.parse.compositegroups import CompositeGroup, parse_composite_group
from paralleljob.k8s.edge.parse.dra import ClaimInfo, SliceInfo, parse_claim, parse_slice
from paralleljob.k8s.edge.parse.nativegroups import NativeGroup, WorkloadInfo, parse_pod_group, parse_workload
from paralleljob.k8s.edge.parse.nodes import NodeInfo, parse_node
from paralleljob.k8s.edge.parse.pods import TERMINAL_PHASES, PodInfo, parse_pod, pod_gpu_request
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_queue, queue_policy
from paralleljob.k8s.edge.parse.slim import slim_job, slim_node, slim_pod, without_managed_fields
from paralleljob.k8s.edge.parse.specs import JobObject, parse_job
from paralleljob.k8s.edge.parse.taintrules import TaintRuleInfo, parse_taint_rule
from paralleljob.k8s.edge.render.computedomain import DomainInfo, parse_domain
from paralleljob.k8s.edge.render.mpsclaims import wanted_claims
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from paralleljob.k8s.plan.actions import ACTIVE, JobActions
from paralleljob.k8s.plan.admission.waiting import WaitingMemo
from paralleljob.k8s.plan.decide import Observed, decide
from paralleljob.k8s.plan.failure.backoff import Backoff
from paralleljob.k8s.plan.groups.composites import fold_composites
from paralleljob.k8s.plan.status import wait_message_changed
from paralleljob.k8s.runtime.api import Kube
from paralleljob.k8s.runtime.claimcollector import ClaimCollector
from paralleljob.k8s.runtime.crashhook import CrashAfterBinds
from paralleljob.k8s.runtime.executor import Executor, Outcome
from paralleljob.k8s.runtime.holders import HolderClaims
from paralleljob.k8s.runtime.observe.events import EventPoster
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.observe.reporting import PassReport
from paralleljob.k8s.runtime.podgroupwriter import PodGroupStatusWriter
from paralleljob.k8s.runtime.supervision import supervised
from paralleljob.k8s.view.clusterview import ClusterView
from paralleljob.k8s.view.dranodes import OverlaidNodes
from paralleljob.k8s.view.liveview import LiveView, NodeSource
from paralleljob.k8s.view.store import ObjectStore
from paralleljob.k8s.view.viewcheck import CheckedView

log = logging.getLogger("paralleljob.k8s")

ADOPTION_RETRY_SECONDS = 10.0


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def relevant_pod(body: Mapping[str, Any]) -> bool:
    """Our workers, pods that hold GPUs, and bound, unfinished pods that request anything (their CPU and
    memory count against their node's allocatable); everything else is not kept in memory."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    spec = body.get("spec") or {}
    if JOB_LABEL in labels or POD_GROUP_LABEL in labels or pod_gpu_request(spec) > 0:
        return True
    if not spec.get("nodeName") or (body.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return False
    return any((c.get("resources") or {}) for c in spec.get("containers") or [] if isinstance(c, Mapping))


# What may change whether a waiting job fits without a node object or a job's own GPUs changing: DRA devices
# (slices, their taint rules, claims held by others) and Kubernetes' gang objects. A change to any clears the
# waiting memo (plan/admission/waiting.py), so every waiting line is looked at again; a DeviceTaintRule deleted while a
# job waited for the device used to leave it Queued until something else moved its line.
FORGETS_WAITING = frozenset(
    {"resourceslice", "devicetaintrule", "resourceclaim", "podgroup", "workload", "compositepodgroup"}
)


def yield_after(seconds: float, share: float) -> float:
    """How long the loop leaves to everything else after a pass of ``seconds``: passes take at most ``share``
    of its time. A pass holds the event loop; back to back, long passes (a flood of new jobs: 0.6 s each)
    starved what feeds them: the status writes, pod creations and binds they launched, and the watch events
    saying those landed, so 5,000 new jobs waited for their first status while passes ran. Quiet passes
    (tens of milliseconds) wait as long again, which nobody notices."""
    if share >= 1.0 or seconds <= 0.0:
        return 0.0
    return min(seconds * (1.0 - share) / share, MAX_YIELD_S)


MAX_YIELD_S = 2.0


class Reconciler:
    def __init__(self, kube: Kube, config: OperatorConfig, metrics: Metrics) -> None:
        self.kube = kube
        self.config = config
        self.metrics = metrics
        topology = config.topology
        # Stores keep slimmed bodies (slim.py): what the parsers read, not managedFields and the like.
        lean = without_managed_fields
        self.jobs: ObjectStore[JobObject] = ObjectStore(parse_job, slim=slim_job, keep_bodies=False)
        self.pods: ObjectStore[PodInfo] = ObjectStore(parse_pod, slim=slim_pod)
        self.nodes: ObjectStore[NodeInfo] = ObjectStore(lambda body: parse_node(body, topology), slim=slim_node)
        self.queues: ObjectStore[QueueInfo] = ObjectStore(parse_queue, slim=lean)
        # DRA (dra.py): ResourceSlices publish GPUs, ResourceClaims hold them; empty unless DRA is on.
        self.slices: ObjectStore[SliceInfo] = ObjectStore(parse_slice, slim=lean)
        self.claims: ObjectStore[ClaimInfo] = ObjectStore(parse_claim, slim=lean)
        # DeviceTaintRules (taintrules.py) taint devices of those slices: health from an admin or our agent.
        self.taint_rules: ObjectStore[TaintRuleInfo] = ObjectStore(parse_taint_rule, slim=lean)
        # Kubernetes' own gang API (nativegroups.py): empty unless the API server serves scheduling.k8s.io.
        self.pod_groups: ObjectStore[NativeGroup] = ObjectStore(parse_pod_group, slim=lean)
        self.workloads: ObjectStore[WorkloadInfo] = ObjectStore(parse_workload, slim=lean)
        self.composites: ObjectStore[CompositeGroup] = ObjectStore(parse_composite_group, slim=lean)
        # Our ComputeDomains (NVL72 trays): those of cliques a job left are deleted (plan/pods/computedomains.py).
        self.compute_domains: ObjectStore[DomainInfo] = ObjectStore(parse_domain, slim=lean)
        self.pod_group_status = PodGroupStatusWriter(kube, self.pod_groups, self.composites)
        self.by_kind: dict[str, ObjectStore[Any]] = {  # each store by the kind its reflector reports
            "podgroup": self.pod_groups,
            "workload": self.workloads,
            "compositepodgroup": self.composites,
            "node": self.nodes,
            "pod": self.pods,
            "job": self.jobs,
            "queue": self.queues,
            "resourceslice": self.slices,
            "resourceclaim": self.claims,
            "devicetaintrule": self.taint_rules,
            "computedomain": self.compute_domains,
        }
        self.events = EventPoster(kube, config.identity, lambda: bool(self.inflight))
        self.report = PassReport(kube, metrics, self.events, self.nodes, self.queues)
        node_source: NodeSource = self.nodes
        if config.dra.enabled:
            node_source = OverlaidNodes(
                self.nodes,
                self.slices,
                self.claims,
                config.dra,
                config.topology.default_gpu_memory_gib,
                self.taint_rules,
            )
        self.view = CheckedView(
            LiveView(topology, node_source, self.pods, lambda why: metrics.view_rebuilds.labels(reason=why).inc()),
            every_passes=config.view_check_passes,
            every_seconds=config.view_check_seconds,
            on_mismatch=lambda differences: metrics.view_mismatches.inc(),
        )
        # Job chains still being carried out (job key -> task, the placement it writes) and orphan deletes.
        self.inflight: dict[str, tuple[asyncio.Task[None], PlacementRecord | None]] = {}
        self.releasing: set[str] = set()  # in-flight chains writing a status that gives the job's GPUs up
        self.background: set[str] = set()  # in-flight chains that only record a waiting job's status
        # job key -> when a pass last started writing its waiting message (epoch seconds; PassContext.wait)
        self.message_written: dict[str, float] = {}
        # (job key, placement epoch) -> when a pass last re-priced it there for a move back (epoch seconds)
        self.repriced_at: dict[tuple[str, int], float] = {}
        self.held_back = 0  # such chains the last pass did not start (OperatorConfig.background_chains)
        self.inflight_orphans: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.inflight_adoptions: dict[str, asyncio.Task[None]] = {}  # pod groups whose ParallelJob is being made
        self.adoption_pauses: dict[str, float] = {}  # pod group -> not before (its ParallelJob was refused)
        crash_hook = CrashAfterBinds(config.crash_after_binds) if config.crash_after_binds else None
        self.executor = Executor(kube, self.jobs, self.pods, self.events.about_job, crash_hook, claim_store=self.claims)
        self.executor.domain_store = self.compute_domains
        self.deferred: set[str] = set()  # jobs a pass left out because their chain was running
        self.wake = asyncio.Event()
        self.claim_collector = ClaimCollector(kube, self.claims, self.pods, config.namespaces, self.wake.set)
        self.synced = asyncio.Event()
        self.leader = asyncio.Event()
        self.bind_failures: dict[str, str] = {}
        self.invalid_pods: dict[str, str] = {}
        self.api_trouble: dict[str, str] = {}
        self.backoff = Backoff()  # decided by the pass (plan.backoff), kept here until the next one
        self.node_warnings: Mapping[str, tuple[str, ...]] = {}  # what was reported (plan.node_warnings)
        self.changed_nodes: set[str] = set()  # nodes whose parsed value changed since the last pass
        self.passes = 0
        self.holders = HolderClaims(self.jobs)  # the placements holding GPUs, kept between passes
        # Waiting jobs and queue lines as the last passes decided them: quiet lines are left out (waiting.py).
        self.waiting = WaitingMemo()
        self.policy = queue_policy(config.queue_policy, config.preemption_grace_seconds)
        self.deadline_timer: asyncio.TimerHandle | None = None
        self.on_pass: Callable[[], None] = lambda: None  # the runtime's health report: a pass completed

    # ---- inputs -------------------------------------------------------------------------------------
    def on_event(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        store = self.by_kind[kind]
        if event_type == "DELETED":
            changed = store.remove(body)
        elif kind == "pod" and not relevant_pod(body):
            changed = store.remove(body, deleted=False)
        else:
            changed = store.upsert(body)
        if kind == "node" and changed:
            self.changed_nodes.add(str((body.get("metadata") or {}).get("name", "")))
        if kind in FORGETS_WAITING and changed:
            self.waiting.clear()
        if kind == "devicetaintrule" and changed and event_type != "DELETED":
            self._warn_rule(body)
        if changed:
            self.wake.set()

    def _warn_rule(self, body: Mapping[str, Any]) -> None:
        rule = self.taint_rules.get("", str((body.get("metadata") or {}).get("name", "")))
        for warning in rule.warnings if rule is not None else ():
            log.warning("%s", warning)

    def on_list(
        self,
        kind: str,
        items: list[dict[str, Any]],
        version: str | None,
        namespace: str | None = None,
        slimmed: bool = False,
    ) -> None:
        """A reflector's full list of one kind (of one namespace, for ParallelJobs watched per namespace);
        ``slimmed``: the items are slimmed already (by the store's own ``slim``)."""
        store = self.by_kind[kind]
        if kind == "pod":
            items = [p for p in items if relevant_pod(p)]
        store.replace_all(items, version, namespace=namespace, slimmed=slimmed)
        if kind in FORGETS_WAITING:
            self.waiting.clear()
        if kind == "node":  # anything may have changed: the pass looks again at what it warned about
            self.changed_nodes |= set(self.node_warnings)
            self.changed_nodes.update(info.name for info in store.values() if info.warnings)
        self.wake.set()

    # ---- the loop -----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Pass whenever something changed, and every ``resync_seconds`` regardless (level-triggered: a
        pass judges everything from the stores, which the reflectors keep current)."""
        self.events.start()
        await self.synced.wait()
        failed = False
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that arrives as the
            # wait completes (CPython gh-86296), and the supervisor stops the loop by cancelling it.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.resync_seconds):
                    await self.wake.wait()
            if failed:  # the last pass threw: try again, but not in a tight loop
                await asyncio.sleep(1.0)
                failed = False
            self.wake.clear()
            if not self.leader.is_set():
                continue
            started = time.monotonic()
            try:
                await self.pass_once()
                self.on_pass()
            except Exception:  # the loop must survive anything a pass throws
                log.exception("reconcile pass failed")
                failed = True
                self.wake.set()
            await asyncio.sleep(yield_after(time.monotonic() - started, self.config.pass_share))

    def stop_acting(self) -> None:
        """Leadership is gone: cancel every write still in flight at once (the next leader decides anew)."""
        self.leader.clear()
        self.waiting.clear()  # a later term starts from a full pass
        tasks = [task for task, _ in self.inflight.values()] + list(self.inflight_orphans.values())
        if self.report.queue_writes is not None:
            tasks.append(self.report.queue_writes)
        for task in tasks:
            task.cancel()

    async def pass_once(self) -> None:
        started = time.monotonic()
        busy = {key: record for key, (_, record) in self.inflight.items()}
        self.deferred.update(busy)  # left out of this pass: decided again once their chains end
        jobs = self.jobs.values()
        view = self.view.refresh(self.holders.claims(busy, self.releasing))
        view.state.begin_trial()
        try:
            self._decide_and_launch(started, jobs, busy, view)
        finally:
            view.state.rollback()

    def _decide_and_launch(
        self, started: float, jobs: list[JobObject], busy: dict[str, PlacementRecord | None], view: ClusterView
    ) -> None:
        """Decide on a snapshot and start carrying the plan out. Each job's chain (status, then pods) runs
        as its own task, so a pass never waits for an earlier gang's binds; a job whose chain is still
        running is left out of the next decisions, and the placement it is writing already holds its GPUs.
        Finished chains wake the loop themselves (when they changed something), and a deadline wakes it by a
        timer, so a pass never asks for the next one."""
        workloads = {w.key: w for w in self.workloads.values()}
        # a CompositePodGroup's children are one gang: their pods one group of the root's name (composites.py)
        pods, pod_groups = fold_composites(
            self.pods.values(), self.pod_groups.values(), self.composites.values(), workloads
        )
        observed = Observed(
            jobs=jobs,
            pods=pods,
            nodes=list(view.nodes.values()),  # as the kept view sees them (DRA pools laid over)
            now=now_rfc3339(),
            now_s=time.time(),
            queues={q.name: q for q in self.queues.values()},
            bind_failures=dict(self.bind_failures),
            api_trouble=dict(self.api_trouble),
            backoff=self.backoff,
            invalid_pods=dict(self.invalid_pods),
            busy=busy,
            namespaces=tuple(self.config.namespaces),
            # as the view sees them: a DRA node's GPU indices are its pool's, so are the warnings about them
            changed_nodes={name: view.nodes.get(name) or self.nodes.get("", name) for name in self.changed_nodes},
            node_warnings=self.node_warnings,
            pod_groups=pod_groups,
            workloads=workloads,
            resource_claims=self._group_claims(),
            # new jobs behind a blocked head beyond this are not decided: their first write could not start
            background_room=max(0, self.config.background_chains - len(self.background)),
            # without the stamps too old to matter: bounded by the writes (re-prices) of one period
            message_written=_recent(self.message_written, self.config.waiting_message_refresh_s),
            message_refresh_s=self.config.waiting_message_refresh_s,
            repriced_at=_recent(self.repriced_at, RECHECK_SECONDS),
            checkpoint_grace_s=self.config.preemption_grace_seconds,
            compute_domains=self.compute_domains.values(),
        )
        self.bind_failures.clear()
        self.invalid_pods.clear()
        self.api_trouble.clear()
        self.changed_nodes.clear()
        plan, view = decide(
            observed,
            self.config.topology,
            self.config.strict_fifo,
            time.perf_counter,
            policy=self.policy,
            view=view,
            memo=self.waiting,
        )
        self.backoff, self.node_warnings = plan.backoff, plan.node_warnings
        self.report.node_events(plan)
        if plan.wake_after is not None:
            # a preemption's grace period or a job's back-off ends then: pass again even if nothing else happens
            if self.deadline_timer is not None:
                self.deadline_timer.cancel()
            self.deadline_timer = asyncio.get_running_loop().call_later(plan.wake_after + 0.05, self.wake.set)
        self.report.warnings(plan, view)
        for seconds in plan.scheduling_seconds:
            self.metrics.scheduling.observe(seconds)
        launched = held_back = 0
        for actions in plan.jobs:
            if actions.repriced is not None:
                self.repriced_at[(actions.job.key, actions.repriced)] = observed.seconds
            if not actions.has_work:
                continue
            if actions.only_records_waiting:
                if len(self.background) >= self.config.background_chains:
                    held_back += 1  # decided again by a later pass, once the writes before it have landed
                    continue
                self.background.add(actions.job.key)
            if actions.writes_status and wait_message_changed(actions.draft):
                self.message_written[actions.job.key] = observed.seconds
            writing = actions.draft.phase in ACTIVE and actions.writes_status
            record = record_from_status(actions.draft.data) if writing else None
            outcome = Outcome()
            task = supervised(
                self.executor.run_job(actions, outcome),
                f"carrying out the decisions for {actions.job.key}",
                functools.partial(self._chain_ended, actions, outcome, started),
            )
            self.inflight[actions.job.key] = (task, record)
            if actions.gives_gpus_up:
                self.releasing.add(actions.job.key)  # its GPUs went to others in this pass (claims_of)
            launched += 1
        for delete in plan.orphans:
            key = (delete.namespace, delete.name)
            if key not in self.inflight_orphans:
                self.inflight_orphans[key] = supervised(
                    self.executor.delete_orphan(delete, Outcome()),
                    f"deleting orphan {delete.namespace}/{delete.name}",
                    functools.partial(self._ended, self.inflight_orphans, key),
                )
        for gone in plan.domain_deletes:  # with the orphans' deletes (a pod's name never holds a "/")
            key = (gone.namespace, f"computedomains/{gone.name}")
            if key not in self.inflight_orphans:
                self.inflight_orphans[key] = supervised(
                    self.executor.delete_domain(gone, Outcome()),
                    f"deleting ComputeDomain {gone.namespace}/{gone.name}",
                    functools.partial(self._ended, self.inflight_orphans, key),
                )
        for manifest in plan.adopt:
            group = object_key(manifest["metadata"]["namespace"], manifest["metadata"]["name"])
            if group not in self.inflight_adoptions and self.adoption_pauses.get(group, 0.0) <= started:
                self.inflight_adoptions[group] = supervised(
                    self._adopt(group, manifest),
                    f"creating the ParallelJob for pod group {group}",
                    functools.partial(self._adoption_ended, group),
                )
        self.held_back = held_back
        self.claim_collector.collect(self.inflight, functools.partial(self._mps_claims, view))
        self.passes += 1
        self.report.figures(plan, view, observed.queues, held_back, getattr(self.kube, "limit", None))
        self.report.queue_waits(plan)
        self.report.queue_status(plan)
        self.pod_group_status.update(observed.jobs, observed.pod_groups, plan.refused_groups)
        # after the gauges and queue statuses: they are part of what every pass costs
        self.metrics.pass_duration.observe(time.monotonic() - started)
        log.debug(
            "pass %d: decided in %.1f ms; %d job chains started (%d status writes held back), %d in flight,"
            " %d waiting jobs left out, %d new ones not decided (no room for their first status write)",
            self.passes,
            (time.monotonic() - started) * 1e3,
            launched,
            held_back,
            len(self.inflight),
            sum(plan.quiet_waiting.values()),
            sum(plan.skipped_pending.values()),
        )


    def _mps_claims(self, view: ClusterView) -> set[tuple[str, str]]:
        """The MPS claims the loaded records and the records being written name (``mpsclaims.wanted_claims``)."""
        records = [(key, claim.record) for key, claim in view.loaded.items() if claim.record.shared]
        records += [(key, record) for key, (_, record) in self.inflight.items() if record is not None]
        return wanted_claims((key.partition("/")[0], record) for key, record in records)

    def _group_claims(self) -> dict[str, ClaimInfo]:
        """The ResourceClaims PodGroups share, by namespace/name (none looked up when no group has any)."""
        wanted = {f"{g.namespace}/{c.claim}" for g in self.pod_groups.values() for c in g.resource_claims if c.claim}
        if not wanted:
            return {}
        return {key: c for c in self.claims.values() if (key := f"{c.namespace}/{c.name}") in wanted}

    def _ended(self, registry: dict[Any, asyncio.Task[None]], key: object, crashed: bool) -> None:
        registry.pop(key, None)
        self.wake.set()

    def _chain_ended(self, actions: JobActions, outcome: Outcome, started: float, crashed: bool) -> None:
        key = actions.job.key
        self.inflight.pop(key, None)
        self.releasing.discard(key)
        if key in self.background:
            self.background.discard(key)
            if self.held_back:
                self.wake.set()  # room for the status writes a pass held back
        self._absorb(outcome, started)
        deferred = key in self.deferred
        self.deferred.discard(key)
        if crashed or deferred or needs_another_pass(actions, outcome):
            self.wake.set()

    async def _adopt(self, key: str, manifest: dict[str, Any]) -> None:
        if await self.executor.create_job(manifest):
            self.adoption_pauses.pop(key, None)
        else:
            self._pause_adoption(key)

    def _adoption_ended(self, key: str, crashed: bool) -> None:
        if crashed:
            self._pause_adoption(key)
        self._ended(self.inflight_adoptions, key, crashed)

    def _pause_adoption(self, key: str) -> None:
        """Refused or failed (the log says why): try again later, not in a tight loop."""
        self.adoption_pauses[key] = time.monotonic() + ADOPTION_RETRY_SECONDS
        asyncio.get_running_loop().call_later(ADOPTION_RETRY_SECONDS, self.wake.set)

    def _absorb(self, outcome: Outcome, started: float) -> None:
        self.report.chain(outcome, started)
        self.invalid_pods.update(outcome.invalid)
        self.bind_failures.update(outcome.failures)  # the next pass rolls the gang back and decides the waits
        self.api_trouble.update(outcome.hold)


def needs_another_pass(actions: JobActions, outcome: Outcome) -> bool:
    """Whether a finished chain must wake the loop. Not when it changed nothing: a status write the API
    server kept as it was (the same resourceVersion: nothing new to decide on) and Events alone. Waking
    then re-runs the same decision on the same input, which is how a status field the CRD prunes became a
    loop of 60-90 passes a second; the watch wakes the loop for anything that does change."""
    if outcome.changed or outcome.failures or outcome.hold or outcome.invalid:
        return True
    return bool(actions.deletes or actions.creates or actions.binds or actions.annotates)


_K = TypeVar("_K")


def _recent(stamps: dict[_K, float], period_s: float) -> dict[_K, float]:
    """Drop, in place, the stamps (epoch seconds) older than ``period_s``; returns ``stamps``."""
    oldest = time.time() - period_s
    for key in [key for key, stamp in stamps.items() if stamp < oldest]:
        del stamps[key]
    return stamps

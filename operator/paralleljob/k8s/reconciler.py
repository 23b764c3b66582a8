"""The reconcile loop: watch events and timers wake it, each pass decides on a consistent snapshot of the
stores and executes the plan, and another pass follows at once while there is work in flight.

Passes never overlap, so one pass's allocations are always visible to the next. The first pass waits for
complete lists of nodes, pods, jobs and queues (a placement made on a partial view could take GPUs that an
unlisted job holds). A full re-list every ``resync_seconds`` repairs anything a watch may have missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any

from paralleljob.k8s.admission import QueueInfo, parse_queue
from paralleljob.k8s.api import ApiError, Kube, retrying
from paralleljob.k8s.config import OperatorConfig
from paralleljob.k8s.constants import GROUP, JOB_LABEL, PLURAL, QUEUE_PLURAL, VERSION
from paralleljob.k8s.decide import Observed, decide
from paralleljob.k8s.events import EventPoster
from paralleljob.k8s.executor import Executor
from paralleljob.k8s.metrics import Metrics
from paralleljob.k8s.metrics_model import gauges
from paralleljob.k8s.nodes import NodeInfo, parse_node
from paralleljob.k8s.pods import PodInfo, parse_pod, pod_gpu_request
from paralleljob.k8s.specs import JobObject, parse_job
from paralleljob.k8s.store import ObjectStore

log = logging.getLogger("paralleljob.k8s")

ROLLBACK_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def relevant_pod(body: Mapping[str, Any]) -> bool:
    """Only our workers and pods that hold GPUs matter; everything else is not kept in memory."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    return JOB_LABEL in labels or pod_gpu_request(body.get("spec") or {}) > 0


class Reconciler:
    def __init__(self, kube: Kube, config: OperatorConfig, metrics: Metrics) -> None:
        self.kube = kube
        self.config = config
        self.metrics = metrics
        topology = config.topology
        self.jobs: ObjectStore[JobObject] = ObjectStore(parse_job)
        self.pods: ObjectStore[PodInfo] = ObjectStore(parse_pod)
        self.nodes: ObjectStore[NodeInfo] = ObjectStore(lambda body: parse_node(body, topology))
        self.queues: ObjectStore[QueueInfo] = ObjectStore(parse_queue)
        self.events = EventPoster(kube, config.identity, lambda: self.executing)
        self.executing = False
        self.executor = Executor(kube, self.jobs, self.pods, self.events.about_job, config.crash_after_binds)
        self.wake = asyncio.Event()
        self.synced = asyncio.Event()
        self.leader = asyncio.Event()
        self.bind_failures: dict[str, str] = {}
        self.invalid_pods: dict[str, str] = {}
        self.holds: dict[str, tuple[float, str]] = {}  # job key -> (not before, why)
        self.rollbacks: dict[str, int] = {}
        self.placed_at: dict[str, float] = {}
        self.failed_at: dict[str, float] = {}
        self.node_warnings: dict[str, tuple[str, ...]] = {}
        self.passes = 0

    # ---- inputs -------------------------------------------------------------------------------------
    def on_event(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        stores: dict[str, ObjectStore[Any]] = {
            "node": self.nodes,
            "pod": self.pods,
            "job": self.jobs,
            "queue": self.queues,
        }
        store = stores[kind]
        if event_type == "DELETED" or (kind == "pod" and not relevant_pod(body)):
            changed = store.remove(body)
        else:
            changed = store.upsert(body)
        if kind == "node" and changed and event_type != "DELETED":
            self._warn_node(body)
        if changed:
            self.wake.set()

    def _warn_node(self, body: Mapping[str, Any]) -> None:
        name = str((body.get("metadata") or {}).get("name", ""))
        info = self.nodes.get("", name)
        if info is None or self.node_warnings.get(name) == info.warnings:
            return
        self.node_warnings[name] = info.warnings
        for warning in info.warnings:
            self.events.about_node(body, "Warning", "MalformedLabel", warning)

    def on_pod_list(self, items: list[dict[str, Any]], version: str | None) -> None:
        self.pods.replace_all([p for p in items if relevant_pod(p)], version)
        self.wake.set()

    async def resync(self) -> None:
        """Re-list everything (level-triggered repair of whatever the watches missed)."""
        namespaces = self.config.namespaces or ("",)
        sources: list[tuple[ObjectStore[Any], list[str]]] = [
            (self.nodes, ["/api/v1/nodes"]),
            (self.queues, [f"/apis/{GROUP}/{VERSION}/{QUEUE_PLURAL}"]),
            (self.jobs, [_ns_path(f"/apis/{GROUP}/{VERSION}", ns, PLURAL) for ns in namespaces]),
            (self.pods, ["/api/v1/pods"]),
        ]
        for store, paths in sources:
            items: list[dict[str, Any]] = []
            rv: str | None = None
            for path in paths:
                try:
                    listed, rv = await retrying(lambda p=path: self.kube.list(p))  # type: ignore[misc]
                except ApiError as exc:
                    if exc.status == 404 and store is self.queues:
                        listed, rv = [], None  # the queue CRD is optional
                    else:
                        raise
                items.extend(listed)
            if store is self.pods:
                items = [p for p in items if relevant_pod(p)]
            store.replace_all(items, rv if len(paths) == 1 else None)
        for body in [self.nodes.body("", n.name) for n in self.nodes.values()]:
            if body is not None:
                self._warn_node(body)
        self.synced.set()
        self.wake.set()

    # ---- the loop -----------------------------------------------------------------------------------
    async def run(self) -> None:
        self.events.start()
        await self.synced.wait()
        next_resync = time.monotonic() + self.config.resync_seconds
        delay = 0.0
        while True:
            timeout = max(0.0, next_resync - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=timeout)
            if delay:
                await asyncio.sleep(delay)
                delay = 0.0
            if time.monotonic() >= next_resync:
                try:
                    await self.resync()
                except ApiError as exc:
                    log.warning("resync failed: %s", exc)
                next_resync = time.monotonic() + self.config.resync_seconds
            self.wake.clear()
            if not self.leader.is_set():
                continue
            try:
                again, delay = await self.pass_once()
            except Exception:  # the loop must survive anything a pass throws
                log.exception("reconcile pass failed")
                again, delay = True, 1.0
            if again:
                self.wake.set()

    async def pass_once(self) -> tuple[bool, float]:
        """One decide-and-execute pass; returns (run again, after this many seconds)."""
        started = time.monotonic()
        holds = {k: why for k, (until, why) in self.holds.items() if until > started}
        self.holds = {k: v for k, v in self.holds.items() if v[0] > started}
        observed = Observed(
            jobs=self.jobs.values(),
            pods=self.pods.values(),
            nodes=self.nodes.values(),
            now=now_rfc3339(),
            queues={q.name: q for q in self.queues.values()},
            bind_failures=dict(self.bind_failures),
            holds=holds,
            invalid_pods=dict(self.invalid_pods),
        )
        self.bind_failures.clear()
        self.invalid_pods.clear()
        plan, view = decide(observed, self.config.topology, self.config.strict_fifo, time.perf_counter)
        decided = time.monotonic()
        for warning in plan.warnings:
            log.warning("%s", warning)
        for seconds in plan.scheduling_seconds:
            self.metrics.scheduling.observe(seconds)
        self.executing = True
        try:
            outcome = await self.executor.execute(plan)
        finally:
            self.executing = False
        log.debug(
            "pass %d: decide %.1f ms, execute %.1f ms; %d status writes, %d binds, %d deletes, %d pods known",
            self.passes,
            (decided - started) * 1e3,
            (time.monotonic() - decided) * 1e3,
            outcome.wrote,
            outcome.bound,
            outcome.deleted,
            len(self.pods),
        )
        self.passes += 1
        self.metrics.passes.inc()
        self.metrics.binds.inc(outcome.bound)
        self._account(outcome.written, started)
        self.invalid_pods.update(outcome.invalid)
        for key, why in outcome.failures.items():
            self.bind_failures[key] = why
            count = self.rollbacks.get(key, 0)
            self.rollbacks[key] = count + 1
            pause = ROLLBACK_BACKOFF[min(count, len(ROLLBACK_BACKOFF) - 1)]
            self.holds[key] = (time.monotonic() + pause, f"retrying in {pause:g} s after: {why}")
        self.metrics.update(gauges(view, plan.jobs, observed.queues))
        # Creates refused with 409 (a predecessor still terminating) are not "busy": its DELETED event wakes us.
        busy = bool(outcome.wrote or outcome.bound or outcome.failures or outcome.invalid or outcome.deleted)
        if outcome.hold:
            return True, 0.5
        return busy, 0.0

    def _account(self, written: list[Any], started: float) -> None:
        for actions in written:
            key = actions.job.key
            if actions.placed_cost is not None:
                self.placed_at[key] = started
            if actions.recovery_started and key not in self.failed_at:
                self.failed_at[key] = started
            if actions.failure_action:
                self.metrics.failures.labels(action=actions.failure_action).inc()
                if actions.failure_action in ("requeued", "failed"):
                    self.failed_at.pop(key, None)
            if actions.gang_bound and key in self.placed_at:
                self.metrics.bind.observe(time.monotonic() - self.placed_at.pop(key))
                self.rollbacks.pop(key, None)
            if actions.recovery_done and key in self.failed_at:
                self.metrics.recovery.observe(time.monotonic() - self.failed_at.pop(key))


def _ns_path(prefix: str, namespace: str, plural: str) -> str:
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"

"""The agent's loop (the imperative shell): wait for XIDs (up to one interval), sample NVML, step the
:class:`~paralleljob.agent.monitor.Monitor`, update the metrics, and write the node when its signals change.

Writes are few on purpose (12,500 agents share one API server): the node is read and patched only when the
signals differ from what was last written, plus a condition heartbeat every ``heartbeat_s`` and a re-read
every ``resync_s`` that repairs a signal someone else changed. Order matters because the operator reads
``GPUHealthy=False`` with an empty ``unhealthy-gpus`` as "every GPU broken": when the condition turns False
the indices are written first, and when it turns True the condition is written first.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from paralleljob.agent.classify import Thresholds
from paralleljob.agent.hysteresis import Hysteresis
from paralleljob.agent.kube import NodeApiError, NodeClient
from paralleljob.agent.metrics import AgentMetrics
from paralleljob.agent.monitor import Monitor, PollResult
from paralleljob.agent.nvml import NvmlSource
from paralleljob.agent.signals import annotation_patch, blocking, condition_patch, find_condition, gpu_condition
from paralleljob.agent.signals import health_detail as detail_of
from paralleljob.core.cluster import GPUHealth

log = logging.getLogger("paralleljob.agent")


def rfc3339_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class AgentConfig:
    node: str
    interval_s: float = 5.0
    thresholds: Thresholds = field(default_factory=Thresholds)
    hysteresis: Hysteresis = field(default_factory=Hysteresis)
    heartbeat_s: float = 300.0
    resync_s: float = 60.0


Signals = tuple[frozenset[int], str | None, tuple[str, str, str]]


def signals_of(result: PollResult) -> Signals:
    return blocking(result.tracks), detail_of(result.tracks), gpu_condition(result.tracks, result.node_error)


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        source: NvmlSource,
        nodes: NodeClient | None,
        metrics: AgentMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.source = source
        self.nodes = nodes
        self.metrics = metrics
        self.clock = clock
        self.monitor = Monitor(config.thresholds, config.hysteresis)
        self.written: Signals | None = None
        self.last_heartbeat = float("-inf")
        self.last_sync = float("-inf")

    async def poll(self) -> PollResult:
        xids = await asyncio.to_thread(self.source.wait_xids, self.config.interval_s)
        sample = await asyncio.to_thread(self.source.sample)
        result = self.monitor.step(sample, xids, self.clock())
        for event in result.xids:
            log.warning("XID %d on GPU %d", event.code, event.gpu)
        for t in result.transitions:
            level = logging.INFO if t.after is GPUHealth.HEALTHY else logging.WARNING
            log.log(
                level, "GPU %d: %s -> %s (%s)", t.gpu, t.before.value, t.after.value, t.track.message or "recovered"
            )
        self.metrics.observe(result.sample, result.xids, result.tracks)
        if self.nodes is not None:
            await self.publish(result)
        return result

    async def publish(self, result: PollResult) -> None:
        now = self.clock()
        wanted = signals_of(result)
        heartbeat_due = now - self.last_heartbeat >= self.config.heartbeat_s
        if wanted == self.written and not heartbeat_due and now - self.last_sync < self.config.resync_s:
            return
        try:
            await self._write(wanted, heartbeat_due)
        except NodeApiError as exc:
            self.metrics.writes.labels(result="error").inc()
            self.written = None  # try again on the next poll
            log.warning("could not update node %s: %s", self.config.node, exc)
            return
        self.written, self.last_sync = wanted, now

    async def _write(self, wanted: Signals, heartbeat_due: bool) -> None:
        assert self.nodes is not None
        agent_blocking, detail, condition = wanted
        for attempt in range(3):
            node = await self.nodes.get()
            metadata, status = node.get("metadata") or {}, node.get("status") or {}
            annotations = annotation_patch(metadata.get("annotations") or {}, agent_blocking, detail)
            previous = find_condition(status.get("conditions"))
            cond = condition_patch(previous, condition, rfc3339_now(), heartbeat_due)
            condition_first = condition[0] == "True"
            try:
                if cond is not None and condition_first:
                    await self._patch_status(cond)
                    cond, heartbeat_due = None, False  # a retry after a 409 need not write it again
                if annotations:
                    await self.nodes.patch_annotations(annotations, str(metadata.get("resourceVersion", "")))
                    self.metrics.writes.labels(result="annotations").inc()
                if cond is not None:
                    await self._patch_status(cond)
                return
            except NodeApiError as exc:
                if exc.status != 409 or attempt == 2:
                    raise
                self.metrics.writes.labels(result="conflict").inc()

    async def _patch_status(self, patch: dict[str, object]) -> None:
        assert self.nodes is not None
        await self.nodes.patch_status(patch)
        self.last_heartbeat = self.clock()
        self.metrics.writes.labels(result="condition").inc()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.poll()
            except Exception:  # one bad poll must not end the node's health reporting
                log.exception("poll failed")
                await asyncio.sleep(self.config.interval_s)

"""The agent's loop (the imperative shell): wait for XIDs (up to one interval), sample NVML, step the
:class:`~paralleljob.agent.monitor.Monitor`, update the metrics, and write the node when its signals change.

Writes are few on purpose (12,500 agents share one API server): the node is read and patched only when the
signals differ from what was last written, plus a condition heartbeat every ``heartbeat_s`` and a re-read
every ``resync_s`` that repairs a signal someone else changed. Order matters because the operator reads
``GPUHealthy=False`` with an empty ``unhealthy-gpus`` as "every GPU broken": when the condition turns False
the indices are written first, and when it turns True the condition is written first.

On a DRA node (``--dra-driver``, and a ResourceSlice of that driver for this node) the agent also keeps one
DeviceTaintRule per non-healthy GPU (``taintrules.py``), written after the annotation and compared with
what it last wrote the same way; the slices are re-read every ``resync_s`` and whenever a non-healthy GPU's
UUID is not among their devices (at most every ``REREAD_UNMATCHED_S``). There the annotation numbers GPUs
by device, as the operator does on DRA nodes (:meth:`Agent.node_tracks`). A cluster without the API (or a
role without the verbs) is said once in the log, and the agent goes on with the annotation alone.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from paralleljob.agent.classify import Thresholds
from paralleljob.agent.hysteresis import GpuTrack, Hysteresis
from paralleljob.agent.kube import NodeApiError, NodeClient
from paralleljob.agent.metrics import AgentMetrics
from paralleljob.agent.monitor import Monitor, PollResult
from paralleljob.agent.nvml import NvmlSource
from paralleljob.agent.signals import annotation_patch, blocking, condition_patch, find_condition, gpu_condition
from paralleljob.agent.signals import health_detail as detail_of
from paralleljob.agent.taintrules import (
    NODE_LABEL,
    DeviceRef,
    devices_by_uuid,
    node_label,
    rule_changes,
    wanted_rules,
)
from paralleljob.core.cluster import GPUHealth

log = logging.getLogger("paralleljob.agent")

REREAD_UNMATCHED_S = 10.0  # at most this often, slices are re-read for a GPU none of their devices has


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
    dra_driver: str = ""  # empty: never look for DRA devices (the annotation only)


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
        # DRA: this node's devices by UUID (None: to be read), the rules last written, and whether the API
        # has what DeviceTaintRules need at all.
        self.devices: dict[str, DeviceRef] | None = None
        self.devices_read = float("-inf")
        self.unmatched_warned: tuple[int, ...] = ()  # NVML indices last reported as matching no device
        self.rules_written: dict[str, dict[str, object]] | None = None
        self.rules_synced = float("-inf")
        self.dra_off = not config.dra_driver
        self.rules_off = False  # the API has no DeviceTaintRules for us (said once)

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
            if not self.dra_off:
                await self.refresh_devices(result)
            await self.publish(result)
            if not self.dra_off and not self.rules_off:
                await self.publish_rules(result)
        return result

    def node_tracks(self, tracks: dict[int, GpuTrack]) -> dict[int, GpuTrack]:
        """The tracks keyed as the operator numbers this node's GPUs. On a DRA node that is the device
        order of the pool (``gpu-<n>`` by n), not NVML's enumeration: the GPU whose UUID is device ``gpu-5``
        is index 5 of the annotation, whatever NVML calls it. If any GPU has no device, NVML's numbering
        is kept (a partial mapping could name two GPUs alike)."""
        if not self.devices:
            return tracks
        uuids = {index: uuid for uuid, index in self.monitor.uuids.items()}
        refs = {index: self.devices.get(uuids.get(index, "")) for index in tracks}
        unmatched = tuple(sorted(index for index, ref in refs.items() if ref is None))
        if unmatched != self.unmatched_warned:
            self.unmatched_warned = unmatched  # once per change, not every poll
            if unmatched:
                log.warning(
                    "NVML GPUs %s (UUIDs %s) match no device of node %s's ResourceSlices: the annotation keeps"
                    " NVML's numbering, which may not be the operator's (a DRA node's GPU i is its i-th device"
                    " by name). With the fake NVML, give each GPU its device's UUID (set: {uuid: ...})",
                    list(unmatched),
                    [uuids.get(i, "") for i in unmatched],
                    self.config.node,
                )
        if unmatched:
            return tracks
        return {ref.index: tracks[index] for index, ref in refs.items() if ref is not None}

    async def publish(self, result: PollResult) -> None:
        now = self.clock()
        wanted = signals_of(replace(result, tracks=self.node_tracks(result.tracks)))
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

    async def refresh_devices(self, result: PollResult) -> None:
        """Read the node's slices when due: at the first poll, every ``resync_s``, and (at most every
        ``REREAD_UNMATCHED_S``) when a non-healthy GPU's UUID is not among the devices read."""
        now = self.clock()
        due = self.devices is None or now - self.devices_read >= self.config.resync_s
        if not due and self.devices and now - self.devices_read >= REREAD_UNMATCHED_S:
            uuids = {index: uuid for uuid, index in self.monitor.uuids.items()}
            due = any(
                uuids.get(index, "") not in self.devices
                for index, track in result.tracks.items()
                if track.state is not GPUHealth.HEALTHY
            )
        if not due:
            return
        try:
            slices = await self.nodes.list_slices() if self.nodes is not None else []
        except NodeApiError as exc:
            if exc.status in (403, 404):
                log.warning(
                    "cannot list ResourceSlices (%s); GPU health goes to the node's annotation only,"
                    " no DeviceTaintRules",
                    exc,
                )
                self.dra_off = True
            else:
                self.metrics.writes.labels(result="error").inc()
                log.warning("could not list the ResourceSlices of node %s: %s", self.config.node, exc)
            return
        self.devices, self.devices_read = devices_by_uuid(slices, self.config.node, self.config.dra_driver), now

    async def publish_rules(self, result: PollResult) -> None:
        """Bring this node's DeviceTaintRules in line with its GPUs' states (a no-op off DRA nodes)."""
        assert self.nodes is not None
        if not self.devices:
            return  # not a DRA node, or its slices could not be read yet
        now = self.clock()
        uuids = {index: uuid for uuid, index in self.monitor.uuids.items()}
        wanted = wanted_rules(self.config.node, result.tracks, uuids, self.devices)
        if wanted.rules == self.rules_written and now - self.rules_synced < self.config.resync_s:
            return
        try:
            existing = await self.nodes.list_rules(f"{NODE_LABEL}={node_label(self.config.node)}")
            changes = rule_changes(existing, wanted.rules)
            for body in changes.create:
                await self.nodes.create_rule(body)
            for body in changes.update:
                await self.nodes.replace_rule(body)
            for name in changes.delete:
                await self.nodes.delete_rule(name)
        except NodeApiError as exc:
            if exc.status in (403, 404) and self.rules_written is None:
                # Before 1.36, without resource.k8s.io/v1beta2 or the DRADeviceTaintRules gate, or without
                # the verbs: the annotation alone then (numbered by device as above).
                log.warning("cannot list DeviceTaintRules (%s); GPU health goes to the node annotation only", exc)
                self.rules_off = True
                return
            self.metrics.writes.labels(result="error").inc()
            self.rules_written = None
            log.warning("could not update the DeviceTaintRules of node %s: %s", self.config.node, exc)
            return
        if changes:
            self.metrics.writes.labels(result="taintrules").inc()
            log.info(
                "DeviceTaintRules of node %s: created %s, updated %s, deleted %s",
                self.config.node,
                [b["metadata"]["name"] for b in changes.create] or "none",
                [b["metadata"]["name"] for b in changes.update] or "none",
                list(changes.delete) or "none",
            )
        for index in wanted.unmatched:
            log.warning("GPU %d (%s) is not a device of any ResourceSlice of this node", index, uuids.get(index))
        self.rules_written, self.rules_synced = wanted.rules, now

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

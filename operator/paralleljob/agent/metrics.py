"""The agent's Prometheus metrics and its ``/metrics`` + ``/healthz`` endpoint (one small aiohttp server).

``/healthz`` answers 503 once no poll has completed for a few intervals: a wedged NVML call (a hung GPU can
block one for minutes) then shows up as a failing liveness probe instead of a silently stale node signal.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from paralleljob.agent.hysteresis import GpuTrack
from paralleljob.agent.model import NodeSample, XidEvent
from paralleljob.agent.xid import classify_xid
from paralleljob.core.cluster import GPUHealth
from paralleljob.shellkit.http import serve_metrics


class AgentMetrics:
    def __init__(self, stale_after_s: float = 60.0) -> None:
        self.registry = r = CollectorRegistry()
        self.health = Gauge(
            "paralleljob_agent_gpu_health",
            "1 for the GPU's current state, 0 for the others",
            ["gpu", "state"],
            registry=r,
        )
        self.xids = Counter("paralleljob_agent_xid", "XID events seen", ["gpu", "xid", "class"], registry=r)
        self.ecc = Gauge(
            "paralleljob_agent_ecc_errors",
            "ECC error counts as NVML reports them",
            ["gpu", "type", "counter"],
            registry=r,
        )
        self.retired = Gauge(
            "paralleljob_agent_retired_pages", "Retired memory pages (pre-Ampere)", ["gpu"], registry=r
        )
        self.remapped = Gauge(
            "paralleljob_agent_remapped_rows", "Remapped memory rows (Ampere+)", ["gpu", "type"], registry=r
        )
        self.temperature = Gauge("paralleljob_agent_temperature_celsius", "GPU temperature", ["gpu"], registry=r)
        self.power = Gauge("paralleljob_agent_power_watts", "GPU power draw", ["gpu"], registry=r)
        self.utilization = Gauge("paralleljob_agent_utilization_ratio", "GPU utilisation, 0..1", ["gpu"], registry=r)
        self.nvlinks = Gauge("paralleljob_agent_nvlinks_active", "Active NVLinks", ["gpu"], registry=r)
        self.polls = Counter("paralleljob_agent_polls", "NVML polls completed", registry=r)
        self.writes = Counter("paralleljob_agent_node_writes", "Node patches, by outcome", ["result"], registry=r)
        self.last_poll = Gauge(
            "paralleljob_agent_last_poll_timestamp_seconds", "Unix time of the last completed poll", registry=r
        )
        self.stale_after_s = stale_after_s
        self._last_poll_monotonic: float | None = None
        self._started = time.monotonic()

    def observe(self, sample: NodeSample, xids: Iterable[XidEvent], tracks: Mapping[int, GpuTrack]) -> None:
        for event in xids:
            rule = classify_xid(event.code)
            self.xids.labels(gpu=str(event.gpu), xid=str(event.code), **{"class": rule.xid_class.value}).inc()
        for index, track in tracks.items():
            for state in GPUHealth:
                self.health.labels(gpu=str(index), state=state.value).set(1.0 if track.state is state else 0.0)
        for gpu in sample.gpus:
            g = str(gpu.index)
            for kind, counter, count in (
                ("corrected", "volatile", gpu.ecc_corrected_volatile),
                ("uncorrected", "volatile", gpu.ecc_uncorrected_volatile),
                ("corrected", "aggregate", gpu.ecc_corrected_aggregate),
                ("uncorrected", "aggregate", gpu.ecc_uncorrected_aggregate),
            ):
                if count is not None:
                    self.ecc.labels(gpu=g, type=kind, counter=counter).set(count)
            if gpu.retired_pages is not None:
                self.retired.labels(gpu=g).set(gpu.retired_pages)
            if gpu.remapped_rows_corrected is not None:
                self.remapped.labels(gpu=g, type="corrected").set(gpu.remapped_rows_corrected)
            if gpu.remapped_rows_uncorrected is not None:
                self.remapped.labels(gpu=g, type="uncorrected").set(gpu.remapped_rows_uncorrected)
            readings: tuple[tuple[Gauge, float | None], ...] = (
                (self.temperature, gpu.temperature_c),
                (self.power, gpu.power_w),
                (self.utilization, None if gpu.utilization_pct is None else gpu.utilization_pct / 100.0),
                (self.nvlinks, gpu.nvlinks_active),
            )
            for gauge, value in readings:
                if value is not None:
                    gauge.labels(gpu=g).set(value)
        self.polls.inc()
        self.last_poll.set(time.time())
        self._last_poll_monotonic = time.monotonic()

    def healthy(self) -> bool:
        last = self._last_poll_monotonic if self._last_poll_monotonic is not None else self._started
        return time.monotonic() - last <= self.stale_after_s

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def serve(metrics: AgentMetrics, host: str, port: int) -> web.AppRunner:
    def health() -> tuple[bool, str]:
        ok = metrics.healthy()
        return ok, "ok\n" if ok else "no NVML poll completed recently\n"

    return await serve_metrics(metrics.render, health, host, port)

"""The agent's memory between polls (no I/O): per-GPU hysteresis tracks, GPU identity by UUID, and the most
NVLinks each GPU has shown active. :meth:`Monitor.step` turns one poll into the GPUs' states.

GPUs are keyed by the NVML index of the first poll that saw their UUID: when a GPU falls off the bus, NVML
may enumerate one device fewer and shift the indices after it, and the node annotation must keep naming the
same physical GPUs (device-plugin indices) as before, with the lost one marked Offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from paralleljob.agent.classify import Observation, Thresholds, observe_node
from paralleljob.agent.hysteresis import GpuTrack, Hysteresis, advance
from paralleljob.agent.model import GpuSample, NodeSample, XidEvent
from paralleljob.core.cluster import GPUHealth


@dataclass(frozen=True, slots=True)
class Transition:
    gpu: int
    before: GPUHealth
    after: GPUHealth
    track: GpuTrack


@dataclass(frozen=True, slots=True)
class PollResult:
    sample: NodeSample
    xids: tuple[XidEvent, ...]
    observations: dict[int, Observation]
    tracks: dict[int, GpuTrack]
    transitions: tuple[Transition, ...]
    node_error: str


class Monitor:
    def __init__(self, thresholds: Thresholds | None = None, hysteresis: Hysteresis | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self.hysteresis = hysteresis or Hysteresis()
        self.tracks: dict[int, GpuTrack] = {}
        self.uuids: dict[str, int] = {}
        self.baseline_links: dict[int, int] = {}

    def _stable(self, sample: NodeSample, xids: Sequence[XidEvent]) -> tuple[NodeSample, list[XidEvent]]:
        moved: dict[int, int] = {}
        by_index: dict[int, GpuSample] = {}
        for gpu in sample.gpus:
            index = self.uuids.setdefault(gpu.uuid, gpu.index) if gpu.uuid else gpu.index
            if index != gpu.index:
                moved[gpu.index] = index
                gpu = replace(gpu, index=index)
            if index not in by_index or not by_index[index].uuid:
                by_index[index] = gpu  # a sample with an identity wins over an anonymous lost one
        stable = replace(sample, gpus=tuple(by_index[i] for i in sorted(by_index)))
        return stable, [replace(x, gpu=moved.get(x.gpu, x.gpu)) for x in xids]

    def step(self, sample: NodeSample, xids: Sequence[XidEvent], now: float) -> PollResult:
        sample, events = self._stable(sample, xids)
        for gpu in sample.gpus:
            if gpu.nvlinks_active is not None:
                self.baseline_links[gpu.index] = max(self.baseline_links.get(gpu.index, 0), gpu.nvlinks_active)
        observations = observe_node(sample, events, self.thresholds, self.baseline_links, known=list(self.tracks))
        transitions = []
        for index, observation in sorted(observations.items()):
            before = self.tracks.get(index, GpuTrack(since=now))
            after = advance(before, observation, now, self.hysteresis)
            self.tracks[index] = after
            if after.state is not before.state:
                transitions.append(Transition(index, before.state, after.state, after))
        return PollResult(sample, tuple(events), observations, dict(self.tracks), tuple(transitions), sample.error)

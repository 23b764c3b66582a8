"""MIG slices a node offers, parsed at the edge into one frozen value (:class:`MigOffer`) whichever way the
node publishes them.

**DRA nodes** (NVIDIA's driver with dynamic MIG, "partitionable devices", KEP 4815): beside each full GPU
(``type`` ``gpu``) the driver publishes every MIG device the GPU could hold (``type`` ``mig``, attribute
``profile`` such as ``1g.10gb``, named ``gpu-<minor>-mig-<profile without dots>-<profile id>-<start>``). The
full GPU and its MIG devices consume counters of one counter set per GPU (``gpu-<minor>-counter-set``): the
GPU's capacities (``multiprocessors``, ``memory``, ...) and one counter ``memory-slice-<i>`` of capacity 1
per memory slice; a MIG device consumes the memory slices of its placement, the full GPU all of them. So a
MIG device's placement is read from its ``memory-slice-<i>`` counters and its GPU from its counter set (the
full GPU consuming the same set; its ``parentUUID`` attribute when no set is named). A claim holding a MIG
device holds that placement on that GPU; the GPU is then not whole for anyone. Facts read from
github.com/NVIDIA/k8s-dra-driver-gpu ``cmd/gpu-kubelet-plugin/partitions.go``, ``mig.go`` and ``driver.go``
(1.35 and later: the counter sets in a slice of their own, the devices in others), and its chart's
``mig.nvidia.com`` DeviceClass (``type == 'mig'``).

**Device-plugin nodes** (the GPU Operator with ``mig.strategy: mixed``): mig-manager partitions the GPUs as
the node's ``nvidia.com/mig.config`` label names (``all-1g.10gb``, ``all-balanced``, ...) and reports
``nvidia.com/mig.config.state`` (``success`` once done); the device plugin offers each profile as the
extended resource ``nvidia.com/mig-<profile>``. Which GPU a slice lands on is the device plugin's choice, so
the value keeps counts per profile only. With ``mig.strategy: single`` the slices are offered as
``nvidia.com/gpu`` itself (``nodes.py`` then counts no whole GPU on the node).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.edge.constants import GPU_COUNT_LABEL, GPU_RESOURCE
from paralleljob.k8s.edge.parse.quantity import parse_count

MIG_TYPE = "mig"
MIG_DEVICE_CLASS = "mig.nvidia.com"  # NVIDIA's chart names its MIG class so
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
PROFILE_PATTERN = r"^[1-7]g\.[0-9]+gb$"  # the CRD's pattern for spec.gpuSharing.migProfile too

_PROFILE = re.compile(PROFILE_PATTERN)
_MEMORY_SLICE = re.compile(r"^memory-slice-(\d+)$")


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device of a GPU: profile ``profile`` at memory slices ``[start, start + size)``."""

    name: str
    profile: str
    start: int
    size: int
    counter_set: str = ""  # the GPU's counter set it consumes from
    parent_uuid: str = ""


@dataclass(frozen=True, slots=True)
class GpuSlices:
    """One full GPU's MIG devices, and which of them claims hold (any claim: the operator's too)."""

    devices: tuple[MigDevice, ...]
    held: frozenset[str] = frozenset()

    def device(self, profile: str, start: int) -> str | None:
        """The name of the MIG device of ``profile`` at ``start`` (None: the GPU publishes none)."""
        for device in self.devices:
            if device.profile == profile and device.start == start:
                return device.name
        return None

    def held_devices(self) -> tuple[MigDevice, ...]:
        return tuple(d for d in self.devices if d.name in self.held)


@dataclass(frozen=True, slots=True)
class MigOffer:
    """What a node offers as MIG slices: per GPU (DRA, ``gpus`` by the node's GPU index) or as counts per
    profile (device plugin, ``counts``)."""

    api: str  # "dra" or "device-plugin"
    gpus: tuple[GpuSlices, ...] = ()
    device_class: str = MIG_DEVICE_CLASS
    counts: tuple[tuple[str, int], ...] = ()  # profile -> allocatable nvidia.com/mig-<profile>
    config: str = ""  # nvidia.com/mig.config
    ready: bool = True  # the device plugin's: mig-manager reports success (else its counts are not used)
    mig_gpus: int = 0  # the device plugin's: GPUs in MIG mode (GFD's nvidia.com/gpu.count less nvidia.com/gpu)

    @property
    def profiles(self) -> tuple[str, ...]:
        if self.api == "dra":
            return tuple(sorted({d.profile for g in self.gpus for d in g.devices}))
        return tuple(profile for profile, _ in self.counts)

    def count(self, profile: str) -> int:
        return dict(self.counts).get(profile, 0)


def _string(attributes: Mapping[str, Any], name: str) -> str:
    value = attributes.get(name)
    if isinstance(value, Mapping) and isinstance(value.get("string"), str):
        return str(value["string"])
    return ""


def counter_set_of(raw: Mapping[str, Any]) -> tuple[str, tuple[int, ...]]:
    """The counter set a device consumes from and the memory slices it consumes (first set only: NVIDIA's
    devices consume from one)."""
    consumes = raw.get("consumesCounters")
    if not isinstance(consumes, list) or not consumes or not isinstance(consumes[0], Mapping):
        return "", ()
    first = consumes[0]
    raw_counters = first.get("counters")
    counters: Mapping[str, Any] = raw_counters if isinstance(raw_counters, Mapping) else {}
    slices = sorted(int(m.group(1)) for name in counters if (m := _MEMORY_SLICE.match(str(name))))
    return str(first.get("counterSet") or ""), tuple(slices)


def parse_mig_device(raw: Mapping[str, Any], warnings: list[str]) -> MigDevice | None:
    """A device of ``type`` mig as a :class:`MigDevice`; None (with a warning) when its profile or placement
    cannot be read: it is then offered to nobody."""
    name = str(raw.get("name") or "")
    raw_attributes = raw.get("attributes")
    attributes: Mapping[str, Any] = raw_attributes if isinstance(raw_attributes, Mapping) else {}
    profile = _string(attributes, "profile")
    counter_set, slices = counter_set_of(raw)
    if not _PROFILE.match(profile):
        warnings.append(f"device {name}: ignored MIG device with profile {profile!r}")
        return None
    if not slices or slices != tuple(range(slices[0], slices[0] + len(slices))):
        warnings.append(f"device {name}: ignored MIG device whose memory slices {list(slices)} are not one run")
        return None
    return MigDevice(name, profile, slices[0], len(slices), counter_set, _string(attributes, "parentUUID"))


def device_plugin_offer(labels: Mapping[str, str], allocatable: Mapping[str, Any]) -> tuple[MigOffer | None, str]:
    """The mixed strategy's ``nvidia.com/mig-<profile>`` resources as a :class:`MigOffer` (None: none
    offered), and a warning when they are not used (mig-manager still reconfiguring the node)."""
    counts = []
    for key, value in allocatable.items():
        if not str(key).startswith(MIG_RESOURCE_PREFIX):
            continue
        profile = str(key).removeprefix(MIG_RESOURCE_PREFIX)
        count = parse_count(value)
        if _PROFILE.match(profile) and count:
            counts.append((profile, count))
    if not counts:
        return None, ""
    counted = parse_count(labels.get(GPU_COUNT_LABEL)) or 0
    mig_gpus = max(0, counted - (parse_count(allocatable.get(GPU_RESOURCE)) or 0))
    state = str(labels.get(MIG_CONFIG_STATE_LABEL) or "")
    ready = state in ("", "success")
    warning = "" if ready else f"{MIG_CONFIG_STATE_LABEL}={state}: its MIG slices take no new work until success"
    return MigOffer("device-plugin", counts=tuple(sorted(counts)), config=str(labels.get(MIG_CONFIG_LABEL) or ""),
                    ready=ready, mig_gpus=mig_gpus), warning  # fmt: skip


def single_strategy(labels: Mapping[str, str]) -> bool:
    """MIG slices offered as ``nvidia.com/gpu`` itself (``mig.strategy: single``): no whole GPU there."""
    return labels.get(MIG_STRATEGY_LABEL) == "single" and "-MIG-" in str(labels.get("nvidia.com/gpu.product") or "")


def dra_offer(
    gpus: Sequence[tuple[str, str, str]], devices: Sequence[MigDevice], held: frozenset[str]
) -> tuple[MigOffer | None, frozenset[int]]:
    """The MIG offer of a DRA node whose full GPUs are ``gpus`` ((name, uuid, counter set) in index order),
    and the GPU indices some claim holds a MIG device of. A MIG device belongs to the GPU consuming the same
    counter set, else to the GPU whose UUID is its ``parentUUID``; one that belongs to none is offered to
    nobody. None when the node publishes no MIG device."""
    if not devices:
        return None, frozenset()
    by_set = {counter_set: i for i, (_, _, counter_set) in enumerate(gpus) if counter_set}
    by_uuid = {uuid: i for i, (_, uuid, _) in enumerate(gpus) if uuid}
    per_gpu: list[list[MigDevice]] = [[] for _ in gpus]
    for device in devices:
        index = by_set.get(device.counter_set, by_uuid.get(device.parent_uuid))
        if index is not None:
            per_gpu[index].append(device)
    slices = tuple(
        GpuSlices(tuple(sorted(d, key=lambda m: (m.profile, m.start))), frozenset(m.name for m in d if m.name in held))
        for d in per_gpu
    )
    return MigOffer("dra", slices), frozenset(i for i, g in enumerate(slices) if g.held)

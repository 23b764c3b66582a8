"""Nodes as the placer needs them, parsed at the edge from raw Node objects (plain dicts).

A node's GPU count comes from ``status.allocatable["nvidia.com/gpu"]`` (a Kubernetes quantity), capped at
GPU Feature Discovery's ``nvidia.com/gpu.count`` and at the configured maximum per node, since a device plugin
that reports 999 GPUs must not get 999 GPUs of work (and an allocatable below the label's count is used as
it is, with a warning: the device plugin offers fewer GPUs than the node has); memory and product from GFD
labels; its domain at each topology level from the configured label keys. Whether it takes new work at all
(Ready, not cordoned, no NoExecute taint) and whether work on it survives (Ready, no NoExecute) are separate
answers; NoSchedule taints are kept for each job's tolerations to answer (``eligibility.py``). A malformed
label or value never fails the parse: it is ignored and reported in ``warnings``, which the operator turns
into a MalformedLabel event.

A GPU an admin drained (``paralleljob.dev/drained-gpus``, written by ``paralleljob drain``) is maintenance, not
a failure: unless the health agent's own detail reports it Offline or Resetting, it is not counted broken
(its job keeps running it until the drain moves the job, ``plan/failure/draining.py``) but it takes no new work, as a
Degraded GPU.

MIG (``migdevices.py``): a node of the GPU Operator's mixed strategy offers its slices as
``nvidia.com/mig-<profile>`` (``NodeInfo.mig``); its ``nvidia.com/gpu`` are only the GPUs not in MIG mode.
With the single strategy its ``nvidia.com/gpu`` *are* MIG slices, so it counts no whole GPU.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paralleljob.k8s.edge.config import TopologyConfig, nvlink_clique
from paralleljob.k8s.edge.constants import (
    DRAIN_NOW_ANNOTATION,
    DRAINED_GPUS_ANNOTATION,
    GPU_COUNT_LABEL,
    GPU_HEALTH_ANNOTATION,
    GPU_HEALTHY_CONDITION,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    UNHEALTHY_GPUS_ANNOTATION,
)
from paralleljob.k8s.edge.parse.matching import FILTER_EFFECTS, Taint
from paralleljob.k8s.edge.parse.migdevices import MigOffer, device_plugin_offer, single_strategy
from paralleljob.k8s.edge.parse.quantity import parse_count, parse_resources

MIB_PER_GIB = 1024.0


@dataclass(frozen=True, slots=True)
class DraGpus:
    """A DRA node's GPUs as claims name them: GPU index ``i`` is device ``devices[i]`` of ``pool``."""

    driver: str
    pool: str
    device_class: str  # what the operator's claims for these GPUs request
    devices: tuple[str, ...]
    pcie_roots: tuple[str, ...] = ()  # resource.kubernetes.io/pcieRoot per device ("" when not published)

    def device_names(self, indices: tuple[int, ...]) -> tuple[str, ...] | None:
        if any(not 0 <= i < len(self.devices) for i in indices):
            return None
        return tuple(self.devices[i] for i in indices)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    uid: str
    gpu_count: int
    gpu_memory_gib: float
    gpu_product: str
    domains: tuple[str | None, ...]  # label value per configured level (None: label absent)
    ready: bool
    not_ready_reason: str
    cordoned: bool
    blocking_taints: tuple[str, ...]  # NoSchedule/NoExecute taints that keep pods without a toleration away
    no_execute: bool  # a NoExecute taint evicts what runs there
    gpu_condition_false: bool  # GPUHealthy=False from the health agent
    unhealthy_gpus: frozenset[int]
    warnings: tuple[str, ...] = ()
    degraded_gpus: frozenset[int] = frozenset()  # still run their job, take no new one (agent's gpu-health)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()  # the NoSchedule/NoExecute taints a job must tolerate to land here
    allocatable: Mapping[str, int] = field(default_factory=dict)  # scheduler units; GPUs are ``gpu_count``
    # Set only for a node whose GPUs are DRA devices (``dra.overlay_node``): where its devices are
    # published, and the GPU indices that ResourceClaims have allocated.
    dra: DraGpus | None = None
    held_gpus: frozenset[int] = frozenset()
    # Drained by an admin for maintenance and not reported broken by the agent: they run their job until the
    # drain moves it (folded into ``degraded_gpus``: no new work); ``drain_now_gpus``: those drained ``--now``.
    drained_gpus: frozenset[int] = frozenset()
    drain_now_gpus: frozenset[int] = frozenset()
    clique: str | None = None  # the NVLink clique (``config.nvlink_clique``); None on an HGX node
    # The MIG slices it offers (``migdevices.py``): its DRA driver's MIG devices (set by ``dra.overlay_node``),
    # or the GPU Operator's nvidia.com/mig-<profile> resources. None: no MIG.
    mig: MigOffer | None = None

    @property
    def takes_new_work(self) -> bool:
        """For any job at all; a NoSchedule taint closes the node only to jobs that do not tolerate it."""
        return self.ready and not self.cordoned and not self.no_execute

    @property
    def runs_work(self) -> bool:
        """False when whatever runs here is lost: NotReady/Unknown or evicted by a NoExecute taint."""
        return self.ready and not self.no_execute

    def broken_gpus(self) -> frozenset[int]:
        """GPU indices that must not run work: all of them when the node is down, or the reported ones."""
        if not self.runs_work:
            return frozenset(range(self.gpu_count))
        if self.gpu_condition_false and not self.unhealthy_gpus:
            return frozenset(range(self.gpu_count))  # the agent says "unhealthy" without saying which
        return frozenset(i for i in self.unhealthy_gpus if i < self.gpu_count)

    def why_closed(self) -> str:
        """Why the node takes no new work (empty when it does)."""
        if not self.ready:
            return f"node {self.name} is not Ready ({self.not_ready_reason or 'no reason given'})"
        if self.no_execute:
            return f"node {self.name} has a NoExecute taint"
        if self.cordoned:
            return f"node {self.name} is cordoned"
        if self.blocking_taints:
            return f"node {self.name} is tainted {', '.join(self.blocking_taints)}"
        return ""


def parse_indices(value: str) -> tuple[frozenset[int], str]:
    """``"0,3, 5"`` -> {0, 3, 5}; returns the parsed set and a warning for any part that is not an index."""
    indices: set[int] = set()
    bad = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if part.isdigit():
            indices.add(int(part))
        else:
            bad.append(part)
    warning = f"ignored malformed GPU indices {bad} in {UNHEALTHY_GPUS_ANNOTATION}" if bad else ""
    return frozenset(indices), warning


def _gpu_count(
    allocatable: object, labels: Mapping[str, str], name: str, config: TopologyConfig, in_mig: bool = False
) -> tuple[int, list[str]]:
    """Allocatable GPUs, capped at what GFD counted and at the configured maximum, with a warning for each cap
    (none for fewer than GFD counted when ``in_mig``: the node's other GPUs are MIG slices)."""
    warnings: list[str] = []
    count = 0
    offered = False  # allocatable is there and readable (a malformed one has its own warning)
    if allocatable is not None:
        parsed = parse_count(allocatable)
        offered = parsed is not None
        if parsed is None:
            warnings.append(f"ignored malformed allocatable {GPU_RESOURCE}={allocatable!r}: not a whole number")
        else:
            count = parsed
    if GPU_COUNT_LABEL in labels:
        label_count = parse_count(labels[GPU_COUNT_LABEL])
        if label_count is None:
            warnings.append(f"ignored malformed label {GPU_COUNT_LABEL}={labels[GPU_COUNT_LABEL]!r}")
        elif count > label_count:
            warnings.append(
                f"allocatable {GPU_RESOURCE}={allocatable} is more than {GPU_COUNT_LABEL}={label_count};"
                f" node {name} is used with {label_count} GPUs"
            )
            count = label_count
        elif offered and count < label_count and not in_mig:
            # The other way round is as worth a word: GFD counted GPUs the device plugin does not offer (not
            # running, not ready, or GPUs it took out as unhealthy), so the node takes less work than it looks.
            warnings.append(
                f"allocatable {GPU_RESOURCE}={allocatable} is less than {GPU_COUNT_LABEL}={label_count};"
                f" node {name} is used with {count} GPUs (is the NVIDIA device plugin running and healthy there?)"
            )
    if count > config.max_gpus_per_node:
        warnings.append(
            f"allocatable {GPU_RESOURCE}={allocatable} is more than the configured maximum of"
            f" {config.max_gpus_per_node} per node (maxGpusPerNode); node {name} is used with"
            f" {config.max_gpus_per_node}"
        )
        count = config.max_gpus_per_node
    return count, warnings


def parse_node(body: Mapping[str, Any], config: TopologyConfig) -> NodeInfo:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    name = str(metadata.get("name", ""))
    warnings: list[str] = []

    raw_allocatable = status.get("allocatable") or {}
    if not isinstance(raw_allocatable, Mapping):
        raw_allocatable = {}
    mig, mig_warning = device_plugin_offer(labels, raw_allocatable)
    if mig_warning:
        warnings.append(f"node {name}: {mig_warning}")
    if single_strategy(labels):
        # its nvidia.com/gpu are MIG slices (mig.strategy single): a job asking for whole GPUs must not get them
        warnings.append(f"node {name} offers MIG slices as {GPU_RESOURCE} (mig.strategy single): no whole GPU there")
        gpu_count = 0
    else:
        # the mixed strategy offers only the GPUs not in MIG mode as nvidia.com/gpu: fewer than GFD counted
        gpu_count, gpu_warnings = _gpu_count(raw_allocatable.get(GPU_RESOURCE), labels, name, config, mig is not None)
        warnings.extend(gpu_warnings)
    allocatable, bad = parse_resources({k: v for k, v in raw_allocatable.items() if k != GPU_RESOURCE})
    warnings.extend(f"ignored malformed allocatable {item}" for item in bad)

    memory = config.default_gpu_memory_gib
    if GPU_MEMORY_LABEL in labels:
        raw = labels[GPU_MEMORY_LABEL]
        try:
            mib = float(raw)
            if not math.isfinite(mib) or mib <= 0:
                raise ValueError(raw)
            memory = mib / MIB_PER_GIB
        except ValueError:
            warnings.append(
                f"ignored malformed label {GPU_MEMORY_LABEL}={raw!r} (MiB expected);"
                f" assuming {config.default_gpu_memory_gib:g} GiB"
            )

    if GPU_PRODUCT_LABEL in labels and not str(labels[GPU_PRODUCT_LABEL]).strip():
        warnings.append(f"ignored empty label {GPU_PRODUCT_LABEL}: node {name} matches no gpuProduct")

    domains: list[str | None] = []
    for level in config.levels:
        value = level.value(labels)
        domains.append(value)
        empty = [key for key in level.labels if key in labels and not labels[key]]
        if value is None and empty:
            warnings.append(f"ignored empty topology label {empty[0]}: node {name} has no {level.name} domain")

    ready, reason, gpu_condition_false = False, "no Ready condition", False
    for condition in status.get("conditions") or []:
        if not isinstance(condition, Mapping):
            continue
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
            reason = "" if ready else str(condition.get("reason") or condition.get("status") or "Unknown")
        elif condition.get("type") == GPU_HEALTHY_CONDITION:
            gpu_condition_false = condition.get("status") == "False"

    blocking, no_execute, taints = [], False, []
    for raw in spec.get("taints") or []:
        if not isinstance(raw, Mapping):
            continue
        taint = Taint(str(raw.get("key") or ""), str(raw.get("value") or ""), str(raw.get("effect") or ""))
        expected = taint.effect == "NoSchedule" and taint.key in config.tolerated_taints
        if taint.effect not in FILTER_EFFECTS or expected:
            continue  # PreferNoSchedule is a preference; the tolerated keys are expected on every GPU node
        no_execute = no_execute or taint.effect == "NoExecute"
        blocking.append(f"{taint.key}:{taint.effect}")
        taints.append(taint)

    unhealthy: frozenset[int] = frozenset()
    if annotations.get(UNHEALTHY_GPUS_ANNOTATION):
        unhealthy, warning = parse_indices(str(annotations[UNHEALTHY_GPUS_ANNOTATION]))
        if warning:
            warnings.append(warning)
        # a device-plugin MIG node's GPUs in MIG mode are not in nvidia.com/gpu, but the agent reports them too
        beyond = indices_beyond(name, unhealthy, gpu_count + (mig.mig_gpus if mig is not None else 0))
        if beyond:
            warnings.append(beyond)
    degraded, warning = parse_degraded(annotations.get(GPU_HEALTH_ANNOTATION))
    if warning:
        warnings.append(warning)
    # The agent writes unhealthy-gpus as its own broken GPUs plus the drained ones: a drained GPU is broken
    # only when the agent's detail says so itself.
    drained, _ = parse_indices(str(annotations.get(DRAINED_GPUS_ANNOTATION) or ""))
    maintenance = drained - _agent_blocking(annotations.get(GPU_HEALTH_ANNOTATION))
    drain_now, _ = parse_indices(str(annotations.get(DRAIN_NOW_ANNOTATION) or ""))
    unhealthy -= maintenance

    return NodeInfo(
        name=name,
        uid=str(metadata.get("uid", "")),
        gpu_count=gpu_count,
        gpu_memory_gib=memory,
        gpu_product=str(labels.get(GPU_PRODUCT_LABEL, "")),
        domains=tuple(domains),
        ready=ready,
        not_ready_reason=reason,
        cordoned=bool(spec.get("unschedulable")),
        blocking_taints=tuple(blocking),
        no_execute=no_execute,
        gpu_condition_false=gpu_condition_false,
        unhealthy_gpus=unhealthy,
        warnings=tuple(warnings),
        degraded_gpus=frozenset(i for i in degraded | maintenance if i < gpu_count) - unhealthy,
        labels=dict(labels),
        taints=tuple(taints),
        allocatable=allocatable,
        drained_gpus=maintenance,
        drain_now_gpus=drain_now & maintenance,
        clique=nvlink_clique(labels, config.levels),
        mig=mig,
    )


def indices_beyond(name: str, unhealthy: frozenset[int], gpu_count: int) -> str:
    """The warning for unhealthy-GPU indices the node does not have ("" when all exist). A DRA node's count
    is its pool's (``dra.overlay_node`` asks again with it), not its allocatable ``nvidia.com/gpu``."""
    beyond = sorted(i for i in unhealthy if i >= gpu_count)
    if not beyond:
        return ""
    return f"ignored GPU indices {beyond} in {UNHEALTHY_GPUS_ANNOTATION}: node {name} has {gpu_count} GPUs"


def _agent_blocking(value: object) -> frozenset[int]:
    """Indices the agent's ``gpu-health`` JSON reports Offline or Resetting (junk: none)."""
    try:
        data = json.loads(str(value)) if value else {}
    except ValueError:
        return frozenset()
    if not isinstance(data, dict):
        return frozenset()
    return frozenset(
        int(key)
        for key, item in data.items()
        if str(key).isdigit() and isinstance(item, dict) and item.get("state") in ("Offline", "Resetting")
    )


def parse_degraded(value: object) -> tuple[frozenset[int], str]:
    """Indices the agent reports Degraded in its ``gpu-health`` JSON, and a warning if it is malformed."""
    if not value:
        return frozenset(), ""
    try:
        data = json.loads(str(value))
    except ValueError:
        return frozenset(), f"ignored {GPU_HEALTH_ANNOTATION}: not JSON"
    if not isinstance(data, dict):
        return frozenset(), f"ignored {GPU_HEALTH_ANNOTATION}: not a JSON object"
    return (
        frozenset(
            int(key)
            for key, item in data.items()
            if str(key).isdigit() and isinstance(item, dict) and item.get("state") == "Degraded"
        ),
        "",
    )

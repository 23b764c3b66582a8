"""Nodes as the placer needs them, parsed at the edge from raw Node objects (plain dicts).

A node's GPU count comes from ``status.allocatable["nvidia.com/gpu"]``; memory and product from GPU Feature
Discovery labels; its domain at each topology level from the configured label keys. Whether it takes new
work (Ready, not cordoned, no NoSchedule/NoExecute taint) and whether work on it survives (Ready, no
NoExecute) are separate answers. A malformed label never fails the parse: it is ignored and reported in
``warnings``, which the operator turns into a Warning event on the node.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.config import TopologyConfig
from paralleljob.k8s.constants import (
    GPU_COUNT_LABEL,
    GPU_HEALTH_ANNOTATION,
    GPU_HEALTHY_CONDITION,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    UNHEALTHY_GPUS_ANNOTATION,
)

MIB_PER_GIB = 1024.0


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
    blocking_taints: tuple[str, ...]  # NoSchedule/NoExecute taints that keep new pods away
    no_execute: bool  # a NoExecute taint evicts what runs there
    gpu_condition_false: bool  # GPUHealthy=False from the health agent
    unhealthy_gpus: frozenset[int]
    warnings: tuple[str, ...] = ()
    degraded_gpus: frozenset[int] = frozenset()  # still run their job, take no new one (agent's gpu-health)

    @property
    def takes_new_work(self) -> bool:
        return self.ready and not self.cordoned and not self.blocking_taints and not self.no_execute

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


def _parse_quantity_int(value: object) -> int | None:
    """Extended resources are plain integers ("8"); anything else is malformed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


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


def parse_node(body: Mapping[str, Any], config: TopologyConfig) -> NodeInfo:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    name = str(metadata.get("name", ""))
    warnings: list[str] = []

    allocatable = (status.get("allocatable") or {}).get(GPU_RESOURCE)
    gpu_count = 0
    if allocatable is not None:
        parsed = _parse_quantity_int(allocatable)
        if parsed is None:
            warnings.append(f"ignored malformed allocatable {GPU_RESOURCE}={allocatable!r}: not a whole number")
        else:
            gpu_count = parsed
    if GPU_COUNT_LABEL in labels:
        label_count = _parse_quantity_int(labels[GPU_COUNT_LABEL])
        if label_count is None:
            warnings.append(f"ignored malformed label {GPU_COUNT_LABEL}={labels[GPU_COUNT_LABEL]!r}")

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

    domains: list[str | None] = []
    for level in config.levels:
        value = next((labels[key] for key in level.labels if labels.get(key)), None)
        domains.append(value)

    ready, reason, gpu_condition_false = False, "no Ready condition", False
    for condition in status.get("conditions") or []:
        if not isinstance(condition, Mapping):
            continue
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
            reason = "" if ready else str(condition.get("reason") or condition.get("status") or "Unknown")
        elif condition.get("type") == GPU_HEALTHY_CONDITION:
            gpu_condition_false = condition.get("status") == "False"

    blocking, no_execute = [], False
    for taint in spec.get("taints") or []:
        if not isinstance(taint, Mapping):
            continue
        key, effect = str(taint.get("key", "")), taint.get("effect")
        if effect == "NoExecute":
            no_execute = True
            blocking.append(f"{key}:NoExecute")
        elif effect == "NoSchedule" and key not in config.tolerated_taints:
            blocking.append(f"{key}:NoSchedule")

    unhealthy: frozenset[int] = frozenset()
    if annotations.get(UNHEALTHY_GPUS_ANNOTATION):
        unhealthy, warning = parse_indices(str(annotations[UNHEALTHY_GPUS_ANNOTATION]))
        if warning:
            warnings.append(warning)
    degraded, warning = parse_degraded(annotations.get(GPU_HEALTH_ANNOTATION))
    if warning:
        warnings.append(warning)

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
        degraded_gpus=frozenset(i for i in degraded if i < gpu_count) - unhealthy,
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

"""``drain`` / ``undrain`` as a node patch (pure).

Draining a node cordons it and marks every GPU drained; draining one GPU only marks that GPU. A drain is
maintenance, not a failure: the drained GPUs are listed in ``paralleljob.dev/drained-gpus``, which the
operator reads as "take no new work, and move the jobs here after they checkpoint" (the preemption's
checkpoint-now signal and grace period, ``k8s/plan/failure/draining.py``), with no restart counted and no failure
recorded. ``--now`` (the emergency) also lists them in ``paralleljob.dev/drain-now-gpus``: their jobs move at
once, still without a restart counted (an admin's emergency is not the job's fault). The drained GPUs are
also written into ``unhealthy-gpus`` as before, which the agent keeps when it rewrites it (so an operator
that predates drains still moves the jobs), and ``undrain`` removes only what was drained, never a GPU the
agent still reports broken. The patch carries the node's resourceVersion, so a concurrent write by
the agent makes it fail with a conflict (and the CLI retries) instead of silently losing one side.

On a DRA node (one with a ResourceSlice pool of the configured driver) the GPUs are the pool's devices, not
``nvidia.com/gpu`` capacity (which the DRA driver does not publish): GPU index ``i`` is the i-th device in the
operator's order (``k8s/edge/parse/dra.py``), so the same indices mean the same GPUs to the operator, the agent and
``paralleljob status``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.agent.signals import (
    DRAINED_GPUS_ANNOTATION,
    GPU_HEALTH_ANNOTATION,
    UNHEALTHY_GPUS_ANNOTATION,
    blocking_from_detail,
    format_indices,
    parse_health_detail,
    parse_index_list,
)
from paralleljob.core.errors import InvalidRequest
from paralleljob.k8s.edge.config import DraConfig, TopologyConfig
from paralleljob.k8s.edge.constants import DRAIN_NOW_ANNOTATION
from paralleljob.k8s.edge.parse.dra import overlay_nodes, parse_slice
from paralleljob.k8s.edge.parse.nodes import parse_node


@dataclass(frozen=True)
class DrainPlan:
    node: str
    patch: dict[str, Any]  # JSON merge patch for the Node
    drained: frozenset[int]
    unhealthy: frozenset[int]
    notes: tuple[str, ...]


def plan(
    body: Mapping[str, Any],
    gpus: Iterable[int] | None,
    undrain: bool = False,
    config: TopologyConfig | None = None,
    slices: Iterable[Mapping[str, Any]] = (),
    dra: DraConfig | None = None,
    now: bool = False,
) -> DrainPlan:
    """The patch that drains (or undrains) ``gpus`` of the node ``body``; ``None`` means the whole node.
    ``slices``: the cluster's ResourceSlices (a DRA node's GPUs are its pool's devices). ``now``: move the
    jobs at once instead of after their checkpoint."""
    config = config or TopologyConfig()
    dra = dra or DraConfig()
    parsed = parse_node(body, config)
    [info] = overlay_nodes([parsed], [parse_slice(s) for s in slices], (), dra, config.default_gpu_memory_gib)
    metadata = body.get("metadata") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    if info.gpu_count == 0 and gpus is None and not undrain:
        raise InvalidRequest(
            f"node {info.name} has no nvidia.com/gpu capacity and no ResourceSlice of driver {dra.driver or '-'}:"
            " nothing to drain"
        )
    targets = frozenset(range(info.gpu_count)) if gpus is None else frozenset(gpus)
    bad = sorted(g for g in targets if g >= info.gpu_count)
    if bad and not undrain:
        kind = f"DRA devices of {dra.driver}" if info.dra is not None else "GPUs"
        indices = f"indices 0-{info.gpu_count - 1}" if info.gpu_count else "none"
        raise InvalidRequest(f"node {info.name} has {info.gpu_count} {kind} ({indices}); no GPU {format_indices(bad)}")
    drained = parse_index_list(annotations.get(DRAINED_GPUS_ANNOTATION))
    urgent = parse_index_list(annotations.get(DRAIN_NOW_ANNOTATION))
    current = parse_index_list(annotations.get(UNHEALTHY_GPUS_ANNOTATION))
    detail = parse_health_detail(annotations.get(GPU_HEALTH_ANNOTATION))
    agent = blocking_from_detail(detail)
    notes: list[str] = []
    if undrain:
        new_drained = drained - targets
        new_urgent = urgent - targets
        unhealthy = (current - targets) | agent | new_drained
        for g in sorted(targets & agent):
            item = detail[g]
            notes.append(
                f"GPU {g} stays unhealthy: the health agent reports it {item.get('state')} ({item.get('reason')})"
            )
    else:
        new_drained = drained | targets
        new_urgent = urgent | targets if now else urgent
        unhealthy = current | new_drained
    patch: dict[str, Any] = {
        "metadata": {
            "resourceVersion": str(metadata.get("resourceVersion", "")),
            "annotations": {
                DRAINED_GPUS_ANNOTATION: format_indices(new_drained) or None,
                DRAIN_NOW_ANNOTATION: format_indices(new_urgent & new_drained) or None,
                UNHEALTHY_GPUS_ANNOTATION: format_indices(unhealthy) or None,
            },
        }
    }
    if gpus is None:
        patch["spec"] = {"unschedulable": None if undrain else True}
    return DrainPlan(info.name, patch, new_drained, unhealthy, tuple(notes))


def parse_gpu_ref(value: str) -> tuple[str, int]:
    """``NODE:IDX`` -> (node, index)."""
    node, sep, index = value.rpartition(":")
    if not sep or not node or not index.isdigit():
        raise InvalidRequest(f"--gpu expects NODE:INDEX (e.g. gpu-node-003:5), got {value!r}")
    return node, int(index)

"""What the agent writes on its Node (pure): annotations and the ``GPUHealthy`` condition.

The operator reads two signals (``paralleljob.k8s.edge.parse.nodes``): the annotation ``paralleljob.dev/unhealthy-gpus``
(comma-separated indices; every listed GPU is taken out of service) and the condition ``GPUHealthy``
(``False`` with an *empty* annotation means every GPU on the node is broken). Hence:

- only Offline and Resetting GPUs are listed; Degraded GPUs keep running their jobs and are not listed, and
  the condition stays ``True`` (reason ``GPUsDegraded``) so they do not take the whole node down;
- ``False`` is written only together with the indices, except when NVML fails node-wide, where "every
  GPU" is exactly what is meant.

Two more annotations make the picture complete without changing the operator's contract:
``paralleljob.dev/gpu-health`` (JSON, per non-healthy GPU: state, reason, message) for humans and the CLI,
and ``paralleljob.dev/drained-gpus``, the GPUs an admin took out with ``paralleljob drain``. The agent
writes ``unhealthy-gpus`` as its own Offline/Resetting GPUs *plus* the drained ones, and the CLI does the
same from the other side, so neither writer erases the other's GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from paralleljob.agent.hysteresis import GpuTrack
from paralleljob.core.cluster import GPUHealth

# Must equal paralleljob.k8s.edge.constants (a unit test pins them); the agent does not import the operator.
UNHEALTHY_GPUS_ANNOTATION = "paralleljob.dev/unhealthy-gpus"
GPU_HEALTHY_CONDITION = "GPUHealthy"
GPU_HEALTH_ANNOTATION = "paralleljob.dev/gpu-health"
DRAINED_GPUS_ANNOTATION = "paralleljob.dev/drained-gpus"

BLOCKING = frozenset({GPUHealth.OFFLINE, GPUHealth.RESETTING})
MAX_MESSAGE = 1024


def format_indices(indices: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(set(indices)))


def parse_index_list(value: object) -> frozenset[int]:
    """Lenient: parts that are not indices are skipped (the operator warns about them on the node)."""
    if not isinstance(value, str):
        return frozenset()
    return frozenset(int(p.strip()) for p in value.split(",") if p.strip().isdigit())


def blocking(tracks: Mapping[int, GpuTrack]) -> frozenset[int]:
    return frozenset(i for i, t in tracks.items() if t.state in BLOCKING)


def health_detail(tracks: Mapping[int, GpuTrack]) -> str | None:
    """JSON of the non-healthy GPUs (None when all are healthy, so the annotation is removed)."""
    bad = {
        str(i): {"state": t.state.value, "reason": t.reason, "message": t.message[:200]}
        for i, t in sorted(tracks.items())
        if t.state is not GPUHealth.HEALTHY
    }
    return json.dumps(bad, sort_keys=True, separators=(",", ":")) if bad else None


def parse_health_detail(value: object) -> dict[int, dict[str, str]]:
    """The ``gpu-health`` annotation back as {index: {state, reason, message}}; junk is skipped."""
    if not isinstance(value, str) or not value:
        return {}
    try:
        data = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[int, dict[str, str]] = {}
    for key, item in data.items():
        if str(key).isdigit() and isinstance(item, dict):
            out[int(key)] = {k: str(v) for k, v in item.items()}
    return out


def blocking_from_detail(detail: Mapping[int, Mapping[str, str]]) -> frozenset[int]:
    """The GPUs the agent has taken out, as its ``gpu-health`` annotation says."""
    names = {s.value for s in BLOCKING}
    return frozenset(i for i, item in detail.items() if item.get("state") in names)


def annotation_patch(
    annotations: Mapping[str, str], agent_blocking: Iterable[int], detail: str | None
) -> dict[str, str | None]:
    """The annotation changes (merge-patch values; None removes) that make the node say what the agent saw.

    ``unhealthy-gpus`` becomes the agent's blocking GPUs plus the admin-drained ones."""
    drained = parse_index_list(annotations.get(DRAINED_GPUS_ANNOTATION))
    unhealthy = format_indices(set(agent_blocking) | drained) or None
    want: dict[str, str | None] = {UNHEALTHY_GPUS_ANNOTATION: unhealthy, GPU_HEALTH_ANNOTATION: detail}
    return {key: value for key, value in want.items() if annotations.get(key) != value}


def _summary(tracks: Mapping[int, GpuTrack], states: Iterable[GPUHealth]) -> tuple[list[int], str, str]:
    wanted = set(states)
    chosen = sorted(i for i, t in tracks.items() if t.state in wanted)
    reasons = {tracks[i].reason for i in chosen}
    reason = reasons.pop() if len(reasons) == 1 else ""
    message = "; ".join(f"GPU {i} {tracks[i].state.value}: {tracks[i].message}" for i in chosen)
    return chosen, reason, message


def gpu_condition(tracks: Mapping[int, GpuTrack], node_error: str = "") -> tuple[str, str, str]:
    """(status, reason, message) of ``GPUHealthy``."""
    if node_error and not tracks:
        return "False", "NVMLUnavailable", f"NVML failed node-wide: {node_error}"[:MAX_MESSAGE]
    chosen, reason, message = _summary(tracks, BLOCKING)
    if chosen:
        return "False", reason or "GPUsUnhealthy", message[:MAX_MESSAGE]
    chosen, _, message = _summary(tracks, [GPUHealth.DEGRADED])
    if chosen:
        # True on purpose: False would take every GPU of the node out (see the module docstring).
        return "True", "GPUsDegraded", message[:MAX_MESSAGE]
    return "True", "GPUsHealthy", f"all {len(tracks)} GPUs healthy"


def find_condition(conditions: object, ctype: str = GPU_HEALTHY_CONDITION) -> Mapping[str, Any] | None:
    for item in conditions if isinstance(conditions, list) else []:
        if isinstance(item, Mapping) and item.get("type") == ctype:
            return item
    return None


def condition_patch(
    previous: Mapping[str, Any] | None, wanted: tuple[str, str, str], now: str, heartbeat_due: bool
) -> dict[str, Any] | None:
    """A strategic-merge patch of ``status.conditions`` (merged by type, so kubelet's conditions are left
    alone), or None when nothing changed and no heartbeat is due. The transition time moves only with the
    status, as Kubernetes conditions expect."""
    status, reason, message = wanted
    same = previous is not None and (previous.get("status"), previous.get("reason"), previous.get("message")) == wanted
    if same and not heartbeat_due:
        return None
    transition = now
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        transition = str(previous["lastTransitionTime"])
    condition = {
        "type": GPU_HEALTHY_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition,
    }
    return {"status": {"conditions": [condition]}}

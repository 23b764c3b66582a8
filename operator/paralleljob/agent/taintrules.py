"""DeviceTaintRules for the GPUs of a DRA node (pure): which rules the agent wants, and what to change.

On a node whose GPUs a DRA driver publishes (a ResourceSlice of ``--dra-driver`` with this node's
``spec.nodeName``), the agent taints each non-healthy GPU's device with one DeviceTaintRule
(``resource.k8s.io/v1beta2``), so that kube-scheduler and every other DRA-aware component avoids it, not
only our operator. The 1.36 rule selects devices by driver, pool and device name only (no attributes), so
the agent maps the GPU's NVML UUID to the device whose ``uuid`` attribute equals it.

Effects: Offline and Resetting (the GPUs the annotation lists as unhealthy) get ``NoExecute`` — pods using
the device are moved (by the operator's failure policy for its workers; kube-controller-manager evicts
other pods) and nothing new is put on it. Degraded gets ``NoSchedule``: what runs there keeps running,
nothing new is allocated it, which is exactly what Degraded means to the operator. The taint's key is
``paralleljob.dev/gpu-health``, its value the state; the reason (``XID79``) is an annotation of the rule.

Rule names are deterministic (node and device), and the agent's rules carry the label
``paralleljob.dev/gpu-health-node``, so an agent restarted after a crash finds and clears its own rules.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.agent.hysteresis import GpuTrack
from paralleljob.core.cluster import GPUHealth

API_VERSION = "resource.k8s.io/v1beta2"  # as 1.36 serves it; the client sends the version the server serves
TAINT_KEY = "paralleljob.dev/gpu-health"
NODE_LABEL = "paralleljob.dev/gpu-health-node"
UUID_ANNOTATION = "paralleljob.dev/gpu-uuid"
REASON_ANNOTATION = "paralleljob.dev/gpu-health-reason"
EFFECTS = {GPUHealth.OFFLINE: "NoExecute", GPUHealth.RESETTING: "NoExecute", GPUHealth.DEGRADED: "NoSchedule"}
GPU_TYPE = "gpu"

_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True, slots=True)
class DeviceRef:
    driver: str
    pool: str
    device: str
    index: int  # the operator's index of this GPU on its node: its place in device order (below)


_NAME_NUMBER = re.compile(r"^gpu-(\d+)$")


def device_order(name: str) -> tuple[int, int, str]:
    """``gpu-<n>`` by n, other names after them: must equal ``paralleljob.k8s.edge.parse.dra.device_order`` (a unit
    test pins them), which numbers a DRA node's GPUs for the operator; the agent does not import it."""
    match = _NAME_NUMBER.match(name)
    return (0, int(match.group(1)), name) if match else (1, 0, name)


def _string(attributes: object, name: str) -> str:
    value = attributes.get(name) if isinstance(attributes, Mapping) else None
    return str(value["string"]) if isinstance(value, Mapping) and isinstance(value.get("string"), str) else ""


def devices_by_uuid(slices: Iterable[Mapping[str, Any]], node: str, driver: str) -> dict[str, DeviceRef]:
    """UUID -> device, over this node's slices of ``driver`` (the newest generation of each pool)."""
    mine = [
        s
        for s in slices
        if (s.get("spec") or {}).get("driver") == driver and (s.get("spec") or {}).get("nodeName") == node
    ]
    newest: dict[str, int] = {}
    for item in mine:
        pool = (item.get("spec") or {}).get("pool") or {}
        name = str(pool.get("name") or "")
        newest[name] = max(newest.get(name, 0), int(pool.get("generation") or 0))
    found: dict[str, tuple[str, str]] = {}  # uuid -> (pool, device)
    for item in mine:
        spec = item.get("spec") or {}
        pool = spec.get("pool") or {}
        name = str(pool.get("name") or "")
        if int(pool.get("generation") or 0) != newest[name]:
            continue
        for device in spec.get("devices") or []:
            if not isinstance(device, Mapping) or _string(device.get("attributes"), "type") != GPU_TYPE:
                continue  # MIG and VFIO devices carry their parent's UUID too; taint the full GPU only
            uuid = _string(device.get("attributes"), "uuid")
            if uuid and device.get("name"):
                found[uuid] = (name, str(device["name"]))
    order = {pool: sorted({d for p, d in found.values() if p == pool}, key=device_order) for pool in newest}
    return {uuid: DeviceRef(driver, pool, d, order[pool].index(d)) for uuid, (pool, d) in found.items()}


def node_label(node: str) -> str:
    """The node's name when it fits a label value (63 characters), else a digest of it."""
    if _LABEL_VALUE.match(node) and len(node) <= 63:
        return node
    return "sha256-" + hashlib.sha256(node.encode()).hexdigest()[:32]


def rule_name(node: str, device: str) -> str:
    """``gpu-health.<node>.<device>``: a DNS subdomain (both parts are), unless too long for one."""
    name = f"gpu-health.{node}.{device}".lower()
    if len(name) <= 253:
        return name
    return f"gpu-health.{hashlib.sha256(node.encode()).hexdigest()[:32]}.{device}".lower()


def rule_body(node: str, ref: DeviceRef, uuid: str, track: GpuTrack) -> dict[str, Any]:
    reason = track.reason or track.state.value
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(node, ref.device),
            "labels": {NODE_LABEL: node_label(node)},
            "annotations": {UUID_ANNOTATION: uuid, REASON_ANNOTATION: reason[:256]},
        },
        "spec": {
            "deviceSelector": {"driver": ref.driver, "pool": ref.pool, "device": ref.device},
            "taint": {"key": TAINT_KEY, "value": track.state.value, "effect": EFFECTS[track.state]},
        },
    }


@dataclass(frozen=True, slots=True)
class Wanted:
    rules: dict[str, dict[str, Any]]  # name -> body
    unmatched: tuple[int, ...]  # non-healthy GPUs whose UUID no slice device has


def wanted_rules(
    node: str, tracks: Mapping[int, GpuTrack], uuids: Mapping[int, str], devices: Mapping[str, DeviceRef]
) -> Wanted:
    """One rule per non-healthy GPU that has a device; ``uuids`` maps the agent's GPU index to its UUID."""
    rules: dict[str, dict[str, Any]] = {}
    unmatched = []
    for index, track in sorted(tracks.items()):
        if track.state not in EFFECTS:
            continue
        uuid = uuids.get(index, "")
        ref = devices.get(uuid)
        if ref is None:
            unmatched.append(index)
            continue
        body = rule_body(node, ref, uuid, track)
        rules[body["metadata"]["name"]] = body
    return Wanted(rules, tuple(unmatched))


def _essence(body: Mapping[str, Any]) -> tuple[object, ...]:
    """What the agent owns of a rule: its selector, taint (less the server's timeAdded) and annotations."""
    spec = body.get("spec") or {}
    taint = {k: v for k, v in (spec.get("taint") or {}).items() if k != "timeAdded"}
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    ours = {k: annotations.get(k) for k in (UUID_ANNOTATION, REASON_ANNOTATION)}
    return (spec.get("deviceSelector"), taint, ours)


@dataclass(frozen=True, slots=True)
class RuleChanges:
    create: tuple[dict[str, Any], ...] = ()
    update: tuple[dict[str, Any], ...] = ()  # wanted bodies carrying the existing resourceVersion
    delete: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.create or self.update or self.delete)


def rule_changes(existing: Iterable[Mapping[str, Any]], wanted: Mapping[str, dict[str, Any]]) -> RuleChanges:
    """Bring the agent's rules on the API server (``existing``, listed by its node label) to ``wanted``."""
    have = {str((r.get("metadata") or {}).get("name")): r for r in existing}
    create, update = [], []
    for name, body in sorted(wanted.items()):
        current = have.get(name)
        if current is None:
            create.append(body)
        elif _essence(current) != _essence(body):
            version = (current.get("metadata") or {}).get("resourceVersion")
            update.append({**body, "metadata": {**body["metadata"], "resourceVersion": version}})
    delete = tuple(sorted(name for name in have if name not in wanted))
    return RuleChanges(tuple(create), tuple(update), delete)

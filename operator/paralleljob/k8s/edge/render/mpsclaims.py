"""The ResourceClaim of an MPS GPU, shared by the pods of every MPS share on it: pure functions over plain dicts.

NVIDIA's DRA driver shares a GPU by MPS among the pods that reference one claim: the claim's opaque config
(``GpuConfig`` of ``resource.nvidia.com/v1beta1``, ``sharing.strategy: MPS``) starts one MPS control daemon
for the claim's device, and its ``mpsConfig`` limits apply to every client: ``defaultActiveThreadPercentage``
(each client's share of the SMs) and ``defaultPinnedDeviceMemoryLimit`` (each client's device memory). The
driver allocates a device to one claim only (it publishes no consumable capacity), and it reads the config
from the claim's ``status.allocation.devices.config``, where kube-scheduler copies the claim's own config
(read, not copied, from github.com/NVIDIA/k8s-dra-driver-gpu: ``api/nvidia.com/resource/v1beta1/sharing.go``
and the kubelet plugin's ``prepareDevices``). So the operator makes one claim per (namespace, GPU, percent):
a claim lives in one namespace, and carries one percentage and one memory limit for all of its clients.

Its name says where and what (``paralleljob-mps-<node>-gpu<index>-<percent>``), so every pass and every
operator after a restart finds the same claim from a record alone; it has no owner (no one job owns it, and
Kubernetes' garbage collector would delete it with its first owner) and is labelled ``MPS_SHARE_LABEL``. The
operator writes its allocation (the exact GPU, with the config) as it does for a worker's own claim, and adds
each pod to ``status.reservedFor`` (the API allows 256 entries; a GPU has at most 48 clients), keeping the
entries of pods that still exist. A claim no record names and no live pod is reserved for is garbage
(``runtime/claimcollector.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from paralleljob.k8s.edge.constants import MANAGED_LABEL, MANAGED_VALUE, MPS_SHARE_LABEL
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.render import claims
from paralleljob.k8s.edge.render.claims import (
    CLAIM_API_VERSION,
    REQUEST_NAME,
    DeviceClaim,
    allocated_devices,
    claim_devices,
)
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot

CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
MAX_RESERVED = 256  # ResourceClaimReservedForMaxSize
_MAX_NAME = 253


def mps_claim_name(node: str, index: int, percent: int) -> str:
    """The claim of GPU ``index`` of ``node`` for shares of ``percent`` (a DNS subdomain: a node's name is one)."""
    name = f"paralleljob-mps-{node}-gpu{index}-{percent}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: _MAX_NAME - 11]}-{digest}"


def memory_limit_mib(gpu_memory_gib: float, percent: int) -> int:
    """Each client's pinned device memory: ``percent`` of the GPU's, in whole MiB (at least 1, the driver's
    smallest limit)."""
    return max(1, int(gpu_memory_gib * 1024 * percent // 100))


def mps_claim(slot: PodSlot, info: NodeInfo) -> DeviceClaim | None:
    """The shared claim the slot's pod references (None: not a DRA node, or its GPU is gone from the pool)."""
    if info.dra is None or slot.mps is None or len(slot.gpu_indices) != 1:
        return None
    devices = info.dra.device_names(slot.gpu_indices)
    if devices is None:
        return None
    index, percent = slot.gpu_indices[0], slot.mps.percent
    return DeviceClaim(
        mps_claim_name(slot.node, index, percent),
        info.dra.driver,
        info.dra.pool,
        info.dra.device_class,
        devices,
        mps_percent=percent,
        mps_memory_mib=memory_limit_mib(info.gpu_memory_gib, percent),
    )


def wanted_claims(records: Iterable[tuple[str, PlacementRecord]]) -> set[tuple[str, str]]:
    """(namespace, claim name) of every MPS claim the given (namespace, record) pairs need."""
    out = set()
    for namespace, record in records:
        for slot in record.slots:
            if slot.mps is not None and len(slot.gpu_indices) == 1:
                out.add((namespace, mps_claim_name(slot.node, slot.gpu_indices[0], slot.mps.percent)))
    return out


def gpu_config(claim: DeviceClaim) -> dict[str, Any]:
    """The driver's opaque config: MPS, each client capped at the share's threads and memory."""
    return {
        "driver": claim.driver,
        "parameters": {
            "apiVersion": CONFIG_API_VERSION,
            "kind": "GpuConfig",
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {
                    "defaultActiveThreadPercentage": claim.mps_percent,
                    "defaultPinnedDeviceMemoryLimit": f"{claim.mps_memory_mib}Mi",
                },
            },
        },
    }


def claim_manifest(namespace: str, claim: DeviceClaim) -> dict[str, Any]:
    return {
        "apiVersion": CLAIM_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim.name,
            "namespace": namespace,
            "labels": {MANAGED_LABEL: MANAGED_VALUE, MPS_SHARE_LABEL: str(claim.mps_percent)},
        },
        "spec": {
            "devices": {**claim_devices(claim), "config": [{"requests": [REQUEST_NAME], "opaque": gpu_config(claim)}]}
        },
    }


def allocation(claim: DeviceClaim, node: str) -> dict[str, Any]:
    """The exact GPU on ``node``, with the claim's config as kube-scheduler would copy it (``FromClaim``)."""
    return claims.allocation(
        claim, node, [{"source": "FromClaim", "requests": [REQUEST_NAME], "opaque": gpu_config(claim)}]
    )


def is_ours(body: Mapping[str, Any], claim: DeviceClaim) -> bool:
    """An MPS claim of the operator's for shares of this size (a claim of that name someone else made is not)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_LABEL) == MANAGED_VALUE and labels.get(MPS_SHARE_LABEL) == str(claim.mps_percent)


def state(body: Mapping[str, Any], claim: DeviceClaim, pod_uid: str) -> str:
    """``done`` (allocated to the GPU and reserved for the pod among others), ``stale`` (allocated to another
    device: replaced) or ``write`` (allocation or reservation still to write)."""
    allocated = claims.allocation_state(body, claim)
    if allocated != "allocated":
        return allocated
    return "done" if pod_uid in reserved_uids(body) else "write"


def reserved_pods(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, uid) of each pod in ``status.reservedFor``."""
    entries = (body.get("status") or {}).get("reservedFor") or []
    return [
        (str(r.get("name")), str(r.get("uid")))
        for r in entries
        if isinstance(r, Mapping) and r.get("resource", "pods") == "pods"
    ]


def reserved_uids(body: Mapping[str, Any]) -> list[str]:
    return [uid for _, uid in reserved_pods(body)]


def reservations(body: Mapping[str, Any], pod_name: str, pod_uid: str, live: Collection[str]) -> list[dict[str, str]]:
    """``status.reservedFor`` with the pod added: the entries of pods still ``live`` (UIDs) kept, in order.
    ValueError when that would pass the API's limit."""
    kept = [
        {"resource": "pods", "name": str(r.get("name")), "uid": str(r.get("uid"))}
        for r in (body.get("status") or {}).get("reservedFor") or []
        if isinstance(r, Mapping) and r.get("resource", "pods") == "pods" and str(r.get("uid")) in live
    ]
    out = [*(r for r in kept if r["uid"] != pod_uid), {"resource": "pods", "name": pod_name, "uid": pod_uid}]
    if len(out) > MAX_RESERVED:
        raise ValueError(f"ResourceClaim would be reserved for {len(out)} pods, the API allows {MAX_RESERVED}")
    return out


def status_patch(
    body: Mapping[str, Any], claim: DeviceClaim, node: str, reserved: list[dict[str, str]]
) -> dict[str, Any]:
    """The status write: the allocation when there is none yet, and the reservations; the claim's
    resourceVersion as precondition, so a concurrent writer's reservation is never lost (409: read again)."""
    status: dict[str, Any] = {"reservedFor": reserved}
    if allocated_devices(body) is None:
        status["allocation"] = allocation(claim, node)
    metadata = body.get("metadata") or {}
    return {"metadata": {"resourceVersion": metadata.get("resourceVersion")}, "status": status}

"""The ResourceClaim a worker on a DRA node gets, as plain dicts: pure functions, tested without a cluster.

One claim per worker pod, named after it (``<pod>-gpus``), in the job's namespace, owned by the
ParallelJob and labelled with the job and the pod. Its spec requests exactly ``tp`` devices of the GPU
DeviceClass; its ``status.allocation`` names the exact devices the placer chose (driver, pool, device per
result) with the node selector of their node, and ``status.reservedFor`` names the pod (name and UID).
The operator writes that status itself, as kube-scheduler would for a pod it schedules: the claim is
allocated before the pod is bound, so the kubelet's DRA driver prepares exactly those devices.

The pod references the claim (``spec.resourceClaims`` and the first container's ``resources.claims``)
instead of requesting ``nvidia.com/gpu``, which a DRA node does not have.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.edge.constants import GPU_RESOURCE, JOB_LABEL, MANAGED_LABEL, MANAGED_VALUE, POD_LABEL
from paralleljob.k8s.edge.parse.migdevices import MIG_RESOURCE_PREFIX
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.render.manifests import owner_reference

CLAIM_API_VERSION = "resource.k8s.io/v1"
REQUEST_NAME = "gpus"  # the claim's one request, and the pod's name for the claim
CLAIM_SUFFIX = "-gpus"


@dataclass(frozen=True, slots=True)
class DeviceClaim:
    """The claim one worker needs: its TP group's devices, in TP-rank order."""

    name: str
    driver: str
    pool: str
    device_class: str
    devices: tuple[str, ...]
    # An MPS GPU's shared claim (``mpsclaims.py``): each client's share in percent, and its memory limit
    mps_percent: int = 0
    mps_memory_mib: int = 0


def claim_name(pod_name: str) -> str:
    return f"{pod_name}{CLAIM_SUFFIX}"


def claim_path(namespace: str, name: str = "", subresource: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def claim_manifest(job: JobObject, pod_name: str, claim: DeviceClaim) -> dict[str, Any]:
    return {
        "apiVersion": CLAIM_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim.name,
            "namespace": job.namespace,
            "labels": {JOB_LABEL: job.name, POD_LABEL: pod_name, MANAGED_LABEL: MANAGED_VALUE},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {"devices": claim_devices(claim)},
    }


def claim_devices(claim: DeviceClaim) -> dict[str, Any]:
    """A claim's ``spec.devices``: one request for exactly as many devices of its class as it names."""
    exactly = {"deviceClassName": claim.device_class, "allocationMode": "ExactCount", "count": len(claim.devices)}
    return {"requests": [{"name": REQUEST_NAME, "exactly": exactly}]}


def allocation(claim: DeviceClaim, node: str, config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The claim's exact devices on ``node`` (and ``config``, the allocation's copy of the claim's own)."""
    devices: dict[str, Any] = {
        "results": [
            {"request": REQUEST_NAME, "driver": claim.driver, "pool": claim.pool, "device": device}
            for device in claim.devices
        ]
    }
    if config:
        devices["config"] = config
    return {
        "devices": devices,
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }


def reserved_for(pod_name: str, pod_uid: str) -> list[dict[str, str]]:
    return [{"resource": "pods", "name": pod_name, "uid": pod_uid}]


def allocated_devices(body: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...] | None:
    """(driver, pool, device) per result of the claim's allocation; None when it is not allocated."""
    current = (body.get("status") or {}).get("allocation")
    if not current:
        return None
    results = (current.get("devices") or {}).get("results") or []
    return tuple((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results)


def state(body: Mapping[str, Any], claim: DeviceClaim, pod_uid: str) -> str:
    """``done`` (allocated as wanted and reserved for the pod), ``stale`` (allocated to other devices:
    an allocation cannot be changed, only the claim replaced) or ``write`` (the status is still to write)."""
    allocated = allocation_state(body, claim)
    if allocated != "allocated":
        return allocated
    reserved = [str(r.get("uid")) for r in (body.get("status") or {}).get("reservedFor") or []]
    return "done" if reserved == [pod_uid] else "write"


def allocation_state(body: Mapping[str, Any], claim: DeviceClaim) -> str:
    """``allocated`` (to exactly the claim's devices), ``stale`` (to others) or ``write`` (not yet)."""
    wanted = tuple((claim.driver, claim.pool, device) for device in claim.devices)
    current = allocated_devices(body)
    if current is None:
        return "write"
    return "allocated" if current == wanted else "stale"


def is_ours(body: Mapping[str, Any], job: JobObject, pod_name: str) -> bool:
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    owners = [str(r.get("uid")) for r in metadata.get("ownerReferences") or [] if isinstance(r, Mapping)]
    return labels.get(JOB_LABEL) == job.name and labels.get(POD_LABEL) == pod_name and job.uid in owners


def with_mig_resource(pod: Mapping[str, Any], profile: str) -> dict[str, Any]:
    """``pod`` asking the device plugin for one MIG slice (``nvidia.com/mig-<profile>``, the GPU Operator's
    mixed strategy) instead of a whole ``nvidia.com/gpu``."""
    out = copy.deepcopy(dict(pod))
    for i, container in enumerate(out["spec"].get("containers") or []):
        resources = container.setdefault("resources", {})
        for section in ("limits", "requests"):
            values = resources.get(section)
            if isinstance(values, dict):
                values.pop(GPU_RESOURCE, None)
                if i == 0:
                    values[f"{MIG_RESOURCE_PREFIX}{profile}"] = "1"
    return out


def with_claim(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``pod`` (a worker manifest) taking its GPUs from claim ``name`` instead of ``nvidia.com/gpu``."""
    out = copy.deepcopy(dict(pod))
    spec = out["spec"]
    for i, container in enumerate(spec.get("containers") or []):
        resources = container.setdefault("resources", {})
        for section in ("limits", "requests"):
            (resources.get(section) or {}).pop(GPU_RESOURCE, None)
        if i == 0:
            resources["claims"] = [{"name": REQUEST_NAME}]
    spec["resourceClaims"] = [{"name": REQUEST_NAME, "resourceClaimName": name}]
    return out

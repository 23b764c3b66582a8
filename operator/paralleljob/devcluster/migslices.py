"""A dev-cluster node set up for MIG, in the shape NVIDIA's DRA driver publishes with dynamic MIG (partitionable
devices, KEP 4815) on Kubernetes 1.35 and later: ``dev-cluster up --gpu-api dra --mig-nodes N``.

One ResourceSlice holds the node's counter sets, one per GPU (``gpu-<minor>-counter-set``: the GPU's
``multiprocessors`` and ``memory`` and one ``memory-slice-<i>`` counter of capacity 1 for each of its eight
memory slices); one slice per GPU then holds its devices: the full GPU, consuming every counter, and every MIG
device the GPU could hold (``type`` ``mig``, attribute ``profile``), each consuming its compute and memory and
the memory slices of its placement. Names follow the driver: ``gpu-<minor>-mig-<profile without dots>-<NVML
GPU-instance profile id>-<placement start>``. The pool has ``1 + GPUs`` slices, the counter slice first, as
the driver writes it (``cmd/gpu-kubelet-plugin/driver.go``, ``partitions.go``). Profiles and placements are the
80 GB parts' (``core.slices.mig.GPU_80GB``); the profile ids and SM counts those ``nvidia-smi mig -lgip``
reports on an H100 80GB. The DeviceClass ``mig.nvidia.com`` selects the MIG devices, as NVIDIA's chart does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from paralleljob.core.slices.mig import GPU_80GB, MEMORY_SLICES, MigProfile
from paralleljob.devcluster.dra import (
    DRIVER,
    RESOURCE_GROUP,
    RESOURCE_VERSION,
    GpuShape,
    _create,
    gpu_device,
    slice_name,
)

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient
# NVML's GPU-instance profile id and the SMs of each profile on an H100 80GB (nvidia-smi mig -lgip)
_PROFILE_IDS = {
    "1g.10gb": (19, 16),
    "1g.20gb": (15, 26),
    "2g.20gb": (14, 32),
    "3g.40gb": (9, 60),
    "4g.40gb": (5, 64),
    "7g.80gb": (0, 132),
}
GPU_SMS = 132
# what a MIG device says of its GPU, as the driver's CommonAttributesMig
_FROM_PARENT = ("productName", "brand", "architecture", "cudaComputeCapability", "driverVersion", "cudaDriverVersion")


def counter_set(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def mig_device_name(minor: int, profile: MigProfile, start: int) -> str:
    return f"gpu-{minor}-mig-{profile.name.replace('.', '')}-{_PROFILE_IDS[profile.name][0]}-{start}"


def _memory_slices(start: int, size: int) -> dict[str, dict[str, str]]:
    return {f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)}


def _counters(shape: GpuShape) -> dict[str, dict[str, str]]:
    return {
        "multiprocessors": {"value": str(GPU_SMS)},
        "memory": {"value": f"{shape.gpu_memory_mib}Mi"},
        **_memory_slices(0, MEMORY_SLICES),
    }


def full_gpu(shape: GpuShape, node: str, minor: int) -> dict[str, Any]:
    """The full GPU as ``dra.gpu_device`` publishes it, consuming its whole counter set."""
    device = gpu_device(shape, node, minor)
    device["consumesCounters"] = [{"counterSet": counter_set(minor), "counters": _counters(shape)}]
    return device


def mig_device(shape: GpuShape, node: str, minor: int, profile: MigProfile, start: int) -> dict[str, Any]:
    parent = gpu_device(shape, node, minor)["attributes"]
    memory = f"{shape.gpu_memory_mib * profile.memory_slices // MEMORY_SLICES}Mi"
    sms = str(_PROFILE_IDS[profile.name][1])
    return {
        "name": mig_device_name(minor, profile, start),
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile.name},
            "parentUUID": parent["uuid"],
            **{key: parent[key] for key in _FROM_PARENT},
        },
        "capacity": {"multiprocessors": {"value": sms}, "memory": {"value": memory}},
        "consumesCounters": [
            {
                "counterSet": counter_set(minor),
                "counters": {
                    "multiprocessors": {"value": sms},
                    "memory": {"value": memory},
                    **_memory_slices(start, profile.memory_slices),
                },
            }
        ],
    }


def _slice(node: str, node_uid: str, name: str, count: int, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}",
        "kind": "ResourceSlice",
        "metadata": {
            "name": name,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
            **body,
        },
    }


def mig_slice_manifests(shape: GpuShape, node: str, node_uid: str) -> list[dict[str, Any]]:
    """The node's pool: its counter sets, then one slice of devices per GPU."""
    count = 1 + shape.gpus_per_node
    minors = range(shape.gpus_per_node)
    sets = [{"name": counter_set(m), "counters": _counters(shape)} for m in minors]
    out = [_slice(node, node_uid, f"{slice_name(node)}-counters", count, {"sharedCounters": sets})]
    for m in minors:
        devices = [full_gpu(shape, node, m)]
        devices += [mig_device(shape, node, m, p, start) for p in GPU_80GB.profiles for start in p.starts]
        out.append(_slice(node, node_uid, f"{slice_name(node)}-gpu-{m}", count, {"devices": devices}))
    return out


async def publish_mig_slices(api: ApiClient, shape: GpuShape, nodes: list[str]) -> None:
    """Each node's MIG pool, its slices owned by the Node object (read for its UID), as ``dra.publish_slices``."""
    from kubernetes_asyncio.client import CoreV1Api

    core = CoreV1Api(api)
    for node in nodes:
        current = await core.read_node(node)
        for body in mig_slice_manifests(shape, node, str(current.metadata.uid)):
            await _create(api, "resourceslices", body)

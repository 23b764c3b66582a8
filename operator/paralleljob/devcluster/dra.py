"""The dev cluster's GPUs as Dynamic Resource Allocation devices (``dev-cluster up --gpu-api dra``).

A real node running NVIDIA's DRA driver (``gpu.nvidia.com``) has no ``nvidia.com/gpu`` allocatable; its
kubelet plugin publishes a ResourceSlice (``resource.k8s.io/v1``) instead: one pool named after the node,
one device per GPU named ``gpu-<minor>``, each with the driver's attributes (``type``, ``uuid``,
``productName``, ``brand``, ``architecture``, CUDA/driver versions) plus the standard
``resource.kubernetes.io/pciBusID`` and ``resource.kubernetes.io/pcieRoot``, and capacity ``memory`` in
bytes. The slice is owned by its Node, so deleting the node deletes the slice (kube-controller-manager's
garbage collector), as on a real cluster. This module builds the same shape for kwok's fake nodes, with two
PCIe root complexes per node (the first half of the GPUs under one, the rest under the other), and the
DeviceClass that selects the driver's full GPUs. Nothing in it is real hardware: UUIDs are derived from
the node name, so a re-created node publishes the same devices.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient


class GpuShape(Protocol):
    """What a slice reads of ``devcluster.nodes.NodeShape``: named here, so that nodes.py (which publishes
    the slices) imports this module and not the other way round."""

    @property
    def gpu_product(self) -> str: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def gpu_memory_mib(self) -> int: ...


RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"  # the name NVIDIA's chart gives its full-GPU class
MIG_DEVICE_CLASS = "mig.nvidia.com"  # ... and its MIG devices' class
_OF_DRIVER = f"device.driver == '{DRIVER}'"
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"

# Values a Hopper node with a recent driver reports; versions are semantic versions in the slice.
ARCHITECTURE = "Hopper"
BRAND = "Nvidia"
CUDA_COMPUTE_CAPABILITY = "9.0.0"
DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"

# Bus numbers of the GPUs on a two-socket HGX board: four behind each CPU's root complex.
_ROOTS = ("pci0000:00", "pci0000:80")
_BUS_BASE = (0x18, 0x9A)
_BUS_STEP = 0x12


GPU_APIS = ("device-plugin", "dra")

# What DRA with device taints needs from a 1.36 control plane. resource.k8s.io/v1 (ResourceSlice,
# DeviceClass, ResourceClaim) is GA and served by default, and the DRADeviceTaints gate (taints in slices,
# the eviction controller) is beta and on. DeviceTaintRule is still only in resource.k8s.io/v1beta2, which
# like every beta API is off by default, and its gate DRADeviceTaintRules is beta but off; the gate also
# decides whether the bootstrap RBAC lets the eviction controller read the rules, so both binaries need it.
APISERVER_ARGS = ("--runtime-config=resource.k8s.io/v1beta2=true", "--feature-gates=DRADeviceTaintRules=true")
CONTROLLER_MANAGER_ARGS = ("--feature-gates=DRADeviceTaintRules=true",)


def product_name(shape: GpuShape) -> str:
    """NVML's product name; GPU Feature Discovery's label is the same string with spaces made dashes."""
    return shape.gpu_product.replace("-", " ")


def device_uuid(node: str, minor: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu-{minor}.dev-cluster.paralleljob.dev')}"


def pcie_placement(shape: GpuShape, minor: int) -> tuple[str, str]:
    """(pcieRoot, pciBusID) of one GPU: the first half of the node's GPUs under the first root complex."""
    half = (shape.gpus_per_node + 1) // 2
    side = 0 if minor < half else 1
    bus = _BUS_BASE[side] + _BUS_STEP * (minor - side * half)
    return _ROOTS[side], f"0000:{bus % 0x100:02x}:00.0"


def gpu_device(shape: GpuShape, node: str, minor: int) -> dict[str, Any]:
    root, bus_id = pcie_placement(shape, minor)
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": device_uuid(node, minor)},
            "productName": {"string": product_name(shape)},
            "brand": {"string": BRAND},
            "architecture": {"string": ARCHITECTURE},
            "cudaComputeCapability": {"version": CUDA_COMPUTE_CAPABILITY},
            "driverVersion": {"version": DRIVER_VERSION},
            "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
            PCI_BUS_ID_ATTRIBUTE: {"string": bus_id},
            PCIE_ROOT_ATTRIBUTE: {"string": root},
        },
        # The driver reports bytes as a binary-SI quantity, which Kubernetes serializes as whole MiB here.
        "capacity": {"memory": {"value": f"{shape.gpu_memory_mib}Mi"}},
    }


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def resource_slice_manifest(shape: GpuShape, node: str, node_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu_device(shape, node, minor) for minor in range(shape.gpus_per_node)],
        },
    }


def device_class_manifest(name: str = DEVICE_CLASS, device_type: str = "gpu") -> dict[str, Any]:
    """A DeviceClass of the driver's devices of one ``type`` (NVIDIA's chart: gpu.nvidia.com, mig.nvidia.com)."""
    return {
        "apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [
                {"cel": {"expression": f"{_OF_DRIVER} && device.attributes['{DRIVER}'].type == '{device_type}'"}}
            ]
        },
    }


async def _create(api: ApiClient, plural: str, body: dict[str, Any]) -> None:
    """Create a cluster-scoped resource.k8s.io object; one that already exists is left as it is."""
    from kubernetes_asyncio.client import CustomObjectsApi
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await CustomObjectsApi(api).create_cluster_custom_object(RESOURCE_GROUP, RESOURCE_VERSION, plural, body)
    except ApiException as exc:
        if exc.status != 409:
            raise


async def publish_device_class(api: ApiClient) -> None:
    await _create(api, "deviceclasses", device_class_manifest())
    await _create(api, "deviceclasses", device_class_manifest(MIG_DEVICE_CLASS, "mig"))


async def publish_slices(api: ApiClient, shape: GpuShape, nodes: list[str]) -> None:
    """One ResourceSlice per node, owned by the Node object (read for its UID)."""
    from kubernetes_asyncio.client import CoreV1Api

    core = CoreV1Api(api)
    for node in nodes:
        current = await core.read_node(node)
        await _create(api, "resourceslices", resource_slice_manifest(shape, node, str(current.metadata.uid)))


async def count_slice_gpus(api: ApiClient) -> int:
    """Full GPUs of the driver in all ResourceSlices, MIG devices not counted (0 where the API is not served)."""
    from kubernetes_asyncio.client import CustomObjectsApi
    from kubernetes_asyncio.client.exceptions import ApiException

    custom = CustomObjectsApi(api)
    try:
        listed = await custom.list_cluster_custom_object(RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices")
    except ApiException:
        return 0
    return sum(
        1
        for item in listed["items"]
        if item["spec"]["driver"] == DRIVER
        for device in item["spec"].get("devices") or []
        if (device.get("attributes") or {}).get("type", {}).get("string") == "gpu"
    )

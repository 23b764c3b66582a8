"""Fake GPU nodes: their manifests (capacity, GPU Feature Discovery labels, topology labels) and helpers to
create them and wait until kwok reports them Ready.

Topology: ``nodes_per_rack`` nodes share a leaf switch (rack), ``racks_per_spine`` racks a spine, and
``spines_per_zone`` spines a zone, so even a small cluster has every level the placer understands.
With ``gpu_api="dra"`` a node carries no GPU resource or GFD labels; its GPUs are a ResourceSlice
(:mod:`paralleljob.devcluster.dra`), published right after the node is created; the first ``mig_nodes`` of
them publish their GPUs in the partitionable MIG shape instead (:mod:`paralleljob.devcluster.migslices`).
With the device plugin, the first ``mig_nodes`` are as the GPU Operator leaves a node that mig-manager set up
with ``all-1g.10gb`` under the mixed strategy: every GPU in MIG mode, so no ``nvidia.com/gpu``, seven
``nvidia.com/mig-1g.10gb`` per GPU, and the ``nvidia.com/mig.*`` labels.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from paralleljob.devcluster.dra import publish_slices
from paralleljob.devcluster.kwok import MANAGED_ANNOTATION
from paralleljob.devcluster.migslices import publish_mig_slices

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

LEAF_LABEL = "network.topology.nvidia.com/leaf"
SPINE_LABEL = "network.topology.nvidia.com/spine"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_RESOURCE = "nvidia.com/gpu"
UNHEALTHY_GPUS_ANNOTATION = "paralleljob.dev/unhealthy-gpus"
GPU_HEALTHY_CONDITION = "GPUHealthy"  # node condition the health agent writes
DEV_CLUSTER_LABEL = "paralleljob.dev/dev-cluster"
# A device-plugin node mig-manager set up with all-1g.10gb (mig-parted's example config) under the mixed strategy
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
MIG_PER_GPU = 7
MIG_MIXED_LABELS = {
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-1g.10gb",
    "nvidia.com/mig.config.state": "success",
}


@dataclass(frozen=True)
class NodeShape:
    """What every fake node looks like, and how nodes are grouped into racks, spines and zones."""

    count: int = 4
    gpus_per_node: int = 8
    nodes_per_rack: int = 4
    racks_per_spine: int = 2
    spines_per_zone: int = 2
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib: int = 81559
    cpu: str = "192"
    memory: str = "2Ti"
    pods: int = 110
    name_prefix: str = "gpu-node"
    # "device-plugin": allocatable nvidia.com/gpu and GFD labels; "dra": ResourceSlices (devcluster/dra.py)
    gpu_api: str = "device-plugin"
    # the first this many nodes are set up for MIG: with DRA every MIG device their GPUs could hold is published,
    # with the device plugin every GPU is seven 1g.10gb slices (mig-manager's all-1g.10gb, mixed strategy)
    mig_nodes: int = 0

    def __post_init__(self) -> None:
        if self.gpu_api not in ("device-plugin", "dra"):
            raise ValueError(f"gpu_api must be 'device-plugin' or 'dra', not {self.gpu_api!r}")
        if not 0 <= self.mig_nodes <= self.count:
            raise ValueError(f"mig_nodes must be between 0 and {self.count} nodes, got {self.mig_nodes}")

    def node_name(self, index: int) -> str:
        return f"{self.name_prefix}-{index:03d}"

    def names(self) -> list[str]:
        return [self.node_name(i) for i in range(self.count)]


def gpu_node_manifest(shape: NodeShape, index: int) -> dict[str, Any]:
    rack = index // shape.nodes_per_rack
    spine = rack // shape.racks_per_spine
    zone = spine // shape.spines_per_zone
    name = shape.node_name(index)
    resources = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods), "ephemeral-storage": "1Ti"}
    gpu_labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": shape.gpu_product,
        "nvidia.com/gpu.memory": str(shape.gpu_memory_mib),
        "nvidia.com/gpu.count": str(shape.gpus_per_node),
    }
    if shape.gpu_api == "dra":
        # A DRA node has no device plugin: its GPUs are known only from its ResourceSlice, so the operator
        # has nothing else to fall back on (no nvidia.com/gpu allocatable, no GFD GPU labels).
        gpu_labels = {}
    elif index < shape.mig_nodes:
        gpu_labels.update(MIG_MIXED_LABELS)
        resources[GPU_RESOURCE] = "0"  # the mixed strategy offers only the GPUs not in MIG mode as nvidia.com/gpu
        resources[MIG_RESOURCE] = str(MIG_PER_GPU * shape.gpus_per_node)
    else:
        resources[GPU_RESOURCE] = str(shape.gpus_per_node)
    key, value = MANAGED_ANNOTATION
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {key: value},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                DEV_CLUSTER_LABEL: "true",
                **gpu_labels,
                LEAF_LABEL: f"leaf-{rack:02d}",
                SPINE_LABEL: f"spine-{spine:02d}",
                ZONE_LABEL: f"zone-{zone}",
            },
        },
        # Nodes, unlike most objects, keep the status they are created with: kwok then only adds
        # conditions, so capacity and allocatable are exactly these.
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


async def create_gpu_nodes(api: ApiClient, shape: NodeShape, indices: list[int] | None = None) -> list[str]:
    """Create the nodes (all of ``shape``, or just ``indices``) and, in DRA mode, their ResourceSlices; ones
    that already exist are left as they are."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    core: Any = CoreV1Api(api)  # Any: dict bodies are accepted although the annotations say V1Node
    created = []
    for index in indices if indices is not None else range(shape.count):
        try:
            await core.create_node(gpu_node_manifest(shape, index))
        except ApiException as exc:
            if exc.status != 409:
                raise
        created.append(shape.node_name(index))
    if shape.gpu_api == "dra":
        mig = {shape.node_name(i) for i in range(shape.mig_nodes)}
        await publish_slices(api, shape, [name for name in created if name not in mig])
        await publish_mig_slices(api, shape, [name for name in created if name in mig])
    return created


def is_ready(node: Any) -> bool:
    for condition in (node.status.conditions or []) if node.status else []:
        if condition.type == "Ready":
            return bool(condition.status == "True")
    return False


async def wait_nodes_ready(api: ApiClient, names: list[str], timeout_s: float = 60.0) -> None:
    """Wait until every node in ``names`` is Ready. ``timeout_s`` bounds the time *without progress*, not the
    total: kwok readies thousands of nodes at a steady rate (12,500 took about 4 minutes), so a fixed total
    would fail a large cluster that is coming up just fine, and a stuck one still fails after ``timeout_s``."""
    from kubernetes_asyncio.client import CoreV1Api

    core = CoreV1Api(api)
    deadline = time.monotonic() + timeout_s
    waiting = set(names)
    pause = min(2.0, 0.2 + len(names) / 5000)  # a list of 12,500 nodes is not free: poll less often
    while True:
        listed = await core.list_node(label_selector=f"{DEV_CLUSTER_LABEL}=true")
        still = set(names) - {node.metadata.name for node in listed.items if is_ready(node)}
        if not still:
            return
        if len(still) < len(waiting):
            deadline = time.monotonic() + timeout_s
        waiting = still
        if time.monotonic() > deadline:
            shown = ", ".join(sorted(waiting)[:10]) + (f" and {len(waiting) - 10} more" if len(waiting) > 10 else "")
            raise TimeoutError(f"{len(waiting)} node(s) not Ready after {timeout_s:.0f} s without progress: {shown}")
        await asyncio.sleep(pause)

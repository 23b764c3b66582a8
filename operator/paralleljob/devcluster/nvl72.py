"""GB200 NVL72 racks in the dev cluster (``dev-cluster up --nvl72-racks N``), and a stand-in for the
ComputeDomain controller of NVIDIA's DRA driver.

A rack is 18 kwok trays of 4 GPUs. Each tray carries GPU Feature Discovery's labels (product
``NVIDIA-GB200``, 4 GPUs of 189,471 MiB) and ``nvidia.com/gpu.clique`` = ``<ClusterUUID>.<CliqueID>``, the
same value on every tray of the rack; its leaf label names its rack (so racks never share a leaf with the
HGX nodes). In DRA mode a tray publishes, instead of ``nvidia.com/gpu``, the GPU driver's slice (as every
DRA node here, ``devcluster/dra``) and the ComputeDomain driver's slice (``compute-domain.nvidia.com``):
the devices ``channel-0`` (type ``channel``, id 0: the only channel a node's slice advertises) and
``daemon-0`` (type ``daemon``), as the driver's kubelet plugin publishes them when it manages IMEX itself.

The ComputeDomain CRD is written here from the driver's API types (``resource.nvidia.com/v1beta1``; see
``k8s/edge/render/computedomain``). The stand-in controller (``python -m paralleljob.devcluster.nvl72``) does the
one thing of the real controller a scheduler relies on: for each ComputeDomain it creates the
ResourceClaimTemplate named in ``spec.channel.resourceClaimTemplate.name``, in the driver's shape, owned by
the ComputeDomain (the real controller uses a finalizer; ownership lets the garbage collector do the same
here). It starts no IMEX daemons: kwok runs no containers.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from paralleljob.devcluster.nodes import LEAF_LABEL, SPINE_LABEL, ZONE_LABEL, NodeShape, gpu_node_manifest
from paralleljob.k8s.edge.render.computedomain import (
    CHANNEL_DEVICE_CLASS,
    CLIQUE_LABEL,
    DRIVER,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    channel_claim_template,
)

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

TRAYS_PER_RACK = 18
GPUS_PER_TRAY = 4
PRODUCT = "NVIDIA-GB200"
GPU_MEMORY_MIB = 189471
CLUSTER_UUID = str(uuid.uuid5(uuid.NAMESPACE_DNS, "nvlink-fabric.dev-cluster.paralleljob.dev"))


def tray_shape(racks: int, gpu_api: str) -> NodeShape:
    return NodeShape(
        count=racks * TRAYS_PER_RACK,
        gpus_per_node=GPUS_PER_TRAY,
        nodes_per_rack=TRAYS_PER_RACK,
        racks_per_spine=2,
        gpu_product=PRODUCT,
        gpu_memory_mib=GPU_MEMORY_MIB,
        cpu="144",
        memory="960Gi",
        name_prefix="gb200",
        gpu_api=gpu_api,
    )


def clique_value(rack: int) -> str:
    return f"{CLUSTER_UUID}.{rack}"


def tray_node_manifest(shape: NodeShape, index: int) -> dict[str, Any]:
    manifest = gpu_node_manifest(shape, index)
    rack = index // TRAYS_PER_RACK
    labels = manifest["metadata"]["labels"]
    labels[LEAF_LABEL] = f"nvl72-rack-{rack:02d}"
    labels[SPINE_LABEL] = f"nvl72-spine-{rack // shape.racks_per_spine:02d}"
    labels[ZONE_LABEL] = "zone-nvl72"
    labels[CLIQUE_LABEL] = clique_value(rack)
    return manifest


def channel_slice_manifest(node: str, node_uid: str) -> dict[str, Any]:
    def device(kind: str) -> dict[str, Any]:
        return {"name": f"{kind}-0", "attributes": {"type": {"string": kind}, "id": {"int": 0}}}

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-{DRIVER}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [device("channel"), device("daemon")],
        },
    }


def channel_device_class() -> dict[str, Any]:
    attrs = f"device.attributes['{DRIVER}']"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CHANNEL_DEVICE_CLASS},
        "spec": {
            "selectors": [
                {"cel": {"expression": f"device.driver == '{DRIVER}' && {attrs}.type == 'channel' && {attrs}.id == 0"}}
            ]
        },
    }


def compute_domain_crd() -> dict[str, Any]:
    """The ComputeDomain CRD, from the driver's Go types (ComputeDomainSpec, ComputeDomainStatus)."""
    string = {"type": "string"}
    node = {
        "type": "object",
        "required": ["name", "ipAddress", "cliqueID"],
        "properties": {
            "name": string,
            "ipAddress": string,
            "cliqueID": string,
            "index": {"type": "integer"},
            "status": {"type": "string", "enum": ["Ready", "NotReady"], "default": "NotReady"},
        },
    }
    spec = {
        "type": "object",
        "required": ["channel"],
        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}],
        "properties": {
            "numNodes": {"type": "integer", "minimum": 0, "default": 0},
            "channel": {
                "type": "object",
                "required": ["resourceClaimTemplate"],
                "properties": {
                    "resourceClaimTemplate": {"type": "object", "required": ["name"], "properties": {"name": string}},
                    "allocationMode": {"type": "string", "enum": ["All", "Single"], "default": "Single"},
                },
            },
        },
    }
    status = {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["Ready", "NotReady"], "default": "NotReady"},
            "nodes": {
                "type": "array",
                "items": node,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": "computedomain"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": string,
                                "kind": string,
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


async def install(api: ApiClient, dra_mode: bool) -> None:
    """The ComputeDomain CRD (Established) and, in DRA mode, the channel DeviceClass."""
    import tempfile
    from pathlib import Path

    import yaml

    from paralleljob.devcluster import crds
    from paralleljob.devcluster.dra import _create

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "computedomain.yaml").write_text(yaml.safe_dump(compute_domain_crd()))
        await crds.install_crds(api, Path(folder))
    if dra_mode:
        await _create(api, "deviceclasses", channel_device_class())


async def add_racks(api: ApiClient, racks: int, gpu_api: str) -> list[str]:
    """Create the racks' trays (and their slices in DRA mode) and wait until they are Ready."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from paralleljob.devcluster.dra import _create, publish_slices
    from paralleljob.devcluster.nodes import wait_nodes_ready

    shape = tray_shape(racks, gpu_api)
    core: Any = CoreV1Api(api)
    names = []
    for index in range(shape.count):
        try:
            await core.create_node(tray_node_manifest(shape, index))
        except ApiException as exc:
            if exc.status != 409:
                raise
        names.append(shape.node_name(index))
    if gpu_api == "dra":
        await publish_slices(api, shape, names)
        for name in names:
            current = await core.read_node(name)
            await _create(api, "resourceslices", channel_slice_manifest(name, str(current.metadata.uid)))
    await wait_nodes_ready(api, names)
    return names


# ---- the stand-in controller ----------------------------------------------------------------------------
async def reconcile(api: ApiClient) -> list[str]:
    """Create the missing ResourceClaimTemplate of every ComputeDomain; returns the ones created."""
    from kubernetes_asyncio.client import CustomObjectsApi
    from kubernetes_asyncio.client.exceptions import ApiException

    custom = CustomObjectsApi(api)
    domains = await custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    created = []
    for domain in domains.get("items", []):
        meta = domain["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        name = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
        template = channel_claim_template(meta["namespace"], name, meta["uid"])
        template["metadata"]["ownerReferences"] = [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
            }
        ]
        try:
            await custom.create_namespaced_custom_object(
                "resource.k8s.io", "v1", meta["namespace"], "resourceclaimtemplates", template
            )
            created.append(f"{meta['namespace']}/{name}")
        except ApiException as exc:
            if exc.status != 409:
                raise
    return created


async def run_controller(kubeconfig: str, period_s: float = 0.1) -> None:
    from paralleljob.devcluster.kubeconfig import api_client

    async with api_client(kubeconfig) as api:
        while True:
            for name in await reconcile(api):
                print(f"created ResourceClaimTemplate {name}", flush=True)
            await asyncio.sleep(period_s)


def main() -> None:
    parser = argparse.ArgumentParser(description="stand-in ComputeDomain controller for the dev cluster")
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args()
    asyncio.run(run_controller(args.kubeconfig))


if __name__ == "__main__":
    main()

"""DRA discovery: ResourceSlices and ResourceClaims parsed at the edge, and laid over the nodes (k8s/edge/parse/dra.py).

The slice dicts have the shape NVIDIA's driver publishes (and the dev cluster's ``--gpu-api dra`` copies):
pool named after the node, ``gpu-<minor>`` devices with typed attributes and a ``memory`` capacity.
"""

from __future__ import annotations

import copy
from typing import Any

from paralleljob.devcluster.dra import resource_slice_manifest
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.k8s.edge.config import DraConfig, TopologyConfig
from paralleljob.k8s.edge.parse.dra import (
    device_order,
    held_devices,
    node_gpus,
    overlay_nodes,
    parse_claim,
    parse_slice,
)
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.view.clusterview import build_view
from tests.k8s.factories import node

CONFIG = TopologyConfig()
DRA = DraConfig()


def gpu(minor: int, *, bus: str = "0000:18:00.0", root: str = "pci0000:00", **extra: Any) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-4f1b8c2e-0000-0000-0000-00000000000{minor}"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.95.5"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "resource.kubernetes.io/pciBusID": {"string": bus},
            "resource.kubernetes.io/pcieRoot": {"string": root},
        },
        "capacity": {"memory": {"value": "81559Mi"}},
    }
    device.update(extra)
    return device


def resource_slice(
    node_name: str,
    devices: list[dict[str, Any]],
    *,
    driver: str = "gpu.nvidia.com",
    generation: int = 1,
    count: int = 1,
    name: str | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node_name}-{driver}-x7k2p", "resourceVersion": "10", "uid": "s"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        },
    }


def claim(name: str, results: list[tuple[str, str, str]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpus", "driver": d, "pool": p, "device": dev} for d, p, dev in results]
                },
                "nodeSelector": {"nodeSelectorTerms": []},
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
        },
    }


def dra_node(name: str) -> dict[str, Any]:
    """A node as the DRA driver leaves it: no nvidia.com/gpu allocatable, no GFD GPU labels."""
    body = node(name)
    body["status"]["allocatable"].pop("nvidia.com/gpu")
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count"):
        body["metadata"]["labels"].pop(key)
    return body


def test_slice_parses_the_drivers_attributes() -> None:
    info = parse_slice(resource_slice("n1", [gpu(0), gpu(1, bus="0000:9a:00.0", root="pci0000:80")]))
    assert (info.driver, info.node, info.pool, info.generation, info.slice_count) == (
        "gpu.nvidia.com", "n1", "n1", 1, 1,
    )  # fmt: skip
    first, second = info.devices
    assert first.name == "gpu-0" and first.uuid.startswith("GPU-4f1b8c2e")
    assert first.product == "NVIDIA-H100-80GB-HBM3"  # the GFD label's spelling, so gpuProduct matches both kinds
    assert abs((first.memory_gib or 0) - 81559 / 1024) < 1e-9
    assert (second.pci_bus_id, second.pcie_root) == ("0000:9a:00.0", "pci0000:80")
    assert info.warnings == ()


def test_slice_keeps_only_full_gpus_and_reports_malformed_values() -> None:
    mig = gpu(7)
    mig["name"] = "gpu-0-mig-9-4-4"
    mig["attributes"]["type"] = {"string": "mig"}
    odd = gpu(2, capacity={"memory": {"value": "lots"}}, taints=[{"key": "k", "effect": "Sometimes"}])
    info = parse_slice(resource_slice("n1", [gpu(0), mig, odd, {"attributes": {}}]))
    assert [d.name for d in info.devices] == ["gpu-0", "gpu-2"]
    assert info.devices[1].memory_gib is None and info.devices[1].taints == ()
    assert any("memory='lots'" in w for w in info.warnings)
    assert any("unknown effect 'Sometimes'" in w for w in info.warnings)


def test_device_order_is_natural_so_indices_are_stable() -> None:
    names = ["gpu-10", "gpu-2", "nvlink-switch", "gpu-0", "gpu-1"]
    assert sorted(names, key=device_order) == ["gpu-0", "gpu-1", "gpu-2", "gpu-10", "nvlink-switch"]
    # Published in any order, split over slices: the same indices.
    a = resource_slice("n1", [gpu(3), gpu(1)], count=2, name="a")
    b = resource_slice("n1", [gpu(2), gpu(0)], count=2, name="b")
    pools = node_gpus([parse_slice(b), parse_slice(a)], "gpu.nvidia.com")
    assert [d.name for d in pools["n1"].devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert pools["n1"].warnings == ()


def test_only_the_newest_generation_and_the_configured_driver_count() -> None:
    old = resource_slice("n1", [gpu(i) for i in range(8)], generation=1, name="old")
    new = resource_slice("n1", [gpu(i) for i in range(4)], generation=2, count=2, name="new")
    other = resource_slice("n1", [gpu(0)], driver="gpu.example.com", name="other")
    pools = node_gpus([parse_slice(s) for s in (old, new, other)], "gpu.nvidia.com")
    assert len(pools["n1"].devices) == 4
    assert any("1 of 2 slices" in w for w in pools["n1"].warnings)
    network = resource_slice("", [gpu(0)])
    assert node_gpus([parse_slice(network)], "gpu.nvidia.com") == {}  # not bound to one node


def test_every_allocated_claim_holds_its_devices_of_the_driver() -> None:
    theirs = parse_claim(claim("theirs", [("gpu.nvidia.com", "n1", "gpu-3"), ("gpu.example.com", "n1", "gpu-4")]))
    labels = {"paralleljob.dev/job": "train", "paralleljob.dev/pod": "train-d0-p0"}
    ours = parse_claim(claim("ours", [("gpu.nvidia.com", "n1", "gpu-5")], labels))
    pending = parse_claim({"metadata": {"name": "pending", "namespace": "team"}, "status": {}})
    assert theirs.devices[0].device == "gpu-3" and not theirs.operator_owned
    assert ours.operator_owned and (ours.job, ours.pod, ours.reserved_for) == ("train", "train-d0-p0", ("pod-uid",))
    assert pending.devices == ()
    # The operator's own claims too: the view loads records first, so only leftovers keep GPUs from new work.
    assert held_devices([theirs, ours, pending], "gpu.nvidia.com") == {"n1": frozenset({"gpu-3", "gpu-5"})}


def test_overlay_replaces_a_dra_nodes_gpus_and_leaves_device_plugin_nodes() -> None:
    plugin = parse_node(node("plugin", gpus=8, memory_mib="40960", product="NVIDIA-A100-SXM4-40GB"), CONFIG)
    bare = parse_node(dra_node("dra"), CONFIG)
    assert bare.gpu_count == 0  # without its slice the node has no GPUs at all
    tainted = gpu(6, taints=[{"key": "paralleljob.dev/xid", "value": "79", "effect": "NoExecute"}])
    soft = gpu(5, taints=[{"key": "maintenance", "effect": "NoSchedule"}])
    slices = [parse_slice(resource_slice("dra", [gpu(0), gpu(1), gpu(2), gpu(3), gpu(4), soft, tainted, gpu(7)]))]
    claims = [parse_claim(claim("theirs", [("gpu.nvidia.com", "dra", "gpu-1")]))]
    plugin_out, dra_out = overlay_nodes([plugin, bare], slices, claims, DRA, CONFIG.default_gpu_memory_gib)
    assert plugin_out is plugin
    assert dra_out.gpu_count == 8 and dra_out.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert abs(dra_out.gpu_memory_gib - 81559 / 1024) < 1e-9
    assert dra_out.dra is not None and dra_out.dra.devices[6] == "gpu-6" and dra_out.dra.pool == "dra"
    assert dra_out.dra.device_names((7, 2)) == ("gpu-7", "gpu-2") and dra_out.dra.device_names((8,)) is None
    assert dra_out.held_gpus == frozenset({1})
    assert dra_out.broken_gpus() == frozenset({6}) and dra_out.degraded_gpus == frozenset({5})


def test_overlay_is_off_with_an_empty_driver() -> None:
    bare = parse_node(dra_node("dra"), CONFIG)
    slices = [parse_slice(resource_slice("dra", [gpu(0)]))]
    assert overlay_nodes([bare], slices, [], DraConfig(driver=""), 80.0) == [bare]


def test_view_counts_claimed_devices_as_used_on_mixed_clusters() -> None:
    plugin = parse_node(node("a-plugin"), CONFIG)
    bare = parse_node(dra_node("b-dra"), CONFIG)
    slices = [parse_slice(resource_slice("b-dra", [gpu(i) for i in range(8)]))]
    held = [("gpu.nvidia.com", "b-dra", "gpu-0"), ("gpu.nvidia.com", "b-dra", "gpu-7")]
    claims = [parse_claim(claim("theirs", held))]
    nodes = overlay_nodes([plugin, bare], slices, claims, DRA, 80.0)
    view = build_view(nodes, [], [], CONFIG)
    assert not view.empty
    assert view.topology.node_names == ("a-plugin", "b-dra")
    assert view.state.usable_free(view.node_index["a-plugin"]) == 8
    assert view.state.usable_free(view.node_index["b-dra"]) == 6
    first = view.topology.node_first_gpu[view.node_index["b-dra"]]
    assert view.state.owner[first] is not None and view.state.owner[first + 7] is not None


def test_the_dev_clusters_slice_parses_to_its_shape() -> None:
    shape = NodeShape(count=1, gpus_per_node=8, gpu_api="dra")
    body = copy.deepcopy(resource_slice_manifest(shape, "gpu-node-000", "uid-1"))
    info = parse_slice(body)
    assert [d.name for d in info.devices] == [f"gpu-{i}" for i in range(8)]
    assert {d.pcie_root for d in info.devices[:4]} == {"pci0000:00"}
    assert {d.pcie_root for d in info.devices[4:]} == {"pci0000:80"}
    assert len({d.uuid for d in info.devices}) == 8 and len({d.pci_bus_id for d in info.devices}) == 8
    assert all(d.product == shape.gpu_product and d.memory_gib == shape.gpu_memory_mib / 1024 for d in info.devices)


def test_unhealthy_indices_of_a_dra_node_are_checked_against_its_pool_not_its_allocatable() -> None:
    """The agent marks GPU 1 of a DRA node (no nvidia.com/gpu allocatable): a valid index, no MalformedLabel;
    an index beyond the pool is still reported, with the pool's count."""
    body = dra_node("dra")
    body["metadata"]["annotations"]["paralleljob.dev/unhealthy-gpus"] = "1"
    slices = [parse_slice(resource_slice("dra", [gpu(0), gpu(1)]))]
    [marked] = overlay_nodes([parse_node(body, CONFIG)], slices, [], DRA, 80.0)
    assert marked.warnings == () and marked.broken_gpus() == frozenset({1})
    body["metadata"]["annotations"]["paralleljob.dev/unhealthy-gpus"] = "1,5"
    [beyond] = overlay_nodes([parse_node(body, CONFIG)], slices, [], DRA, 80.0)
    assert beyond.warnings == ("ignored GPU indices [5] in paralleljob.dev/unhealthy-gpus: node dra has 2 GPUs",)


def test_a_drained_gpu_of_a_dra_node_is_maintenance_and_not_a_malformed_index() -> None:
    """``paralleljob drain --gpu dra:1`` writes the index in both drained-gpus and unhealthy-gpus: checked
    against the pool (no MalformedLabel), and the GPU takes no new work without being counted broken."""
    body = dra_node("dra")
    body["metadata"]["annotations"]["paralleljob.dev/unhealthy-gpus"] = "1"
    body["metadata"]["annotations"]["paralleljob.dev/drained-gpus"] = "1"
    slices = [parse_slice(resource_slice("dra", [gpu(0), gpu(1)]))]
    [drained] = overlay_nodes([parse_node(body, CONFIG)], slices, [], DRA, 80.0)
    assert drained.warnings == (), drained.warnings
    assert drained.broken_gpus() == frozenset() and drained.degraded_gpus == frozenset({1})
    body["metadata"]["annotations"]["paralleljob.dev/unhealthy-gpus"] = "1,5"
    body["metadata"]["annotations"]["paralleljob.dev/drained-gpus"] = "1,5"
    [beyond] = overlay_nodes([parse_node(body, CONFIG)], slices, [], DRA, 80.0)
    assert beyond.warnings == ("ignored GPU indices [5] in paralleljob.dev/unhealthy-gpus: node dra has 2 GPUs",)

"""DRA discovery end to end (issue 13, parts 1 and 5): a dev cluster whose GPUs exist only as ResourceSlices
of ``gpu.nvidia.com`` on a real kube-apiserver 1.36, and the operator placing jobs on them.

The nodes here have no ``nvidia.com/gpu`` allocatable and no GFD GPU labels, so any placement at all is
made on slice-derived GPUs; the tests also pin that the GPU indices are the device numbers and that
devices allocated in someone else's ResourceClaim are not given out again.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from pjhelpers import Jobs, assert_gang_on_record, assert_no_gpu_used_twice

from paralleljob.devcluster import dra
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

RESOURCE = ("resource.k8s.io", "v1")


def _custom(kube: KubeSession) -> Any:
    return CustomObjectsApi(kube.api)


def _slices(kube: KubeSession) -> dict[str, dict[str, Any]]:
    listed = kube.run(_custom(kube).list_cluster_custom_object(*RESOURCE, "resourceslices"))
    return {item["spec"]["nodeName"]: item for item in listed["items"]}


def test_dra_cluster_publishes_nvidia_shaped_slices_and_a_device_class(
    dra_cluster: DevCluster, dra_kube: KubeSession
) -> None:
    slices = _slices(dra_kube)
    assert sorted(slices) == list(dra_cluster.nodes)
    for node_name, item in slices.items():
        spec = item["spec"]
        assert spec["driver"] == "gpu.nvidia.com" and spec["pool"]["name"] == node_name
        assert item["metadata"]["ownerReferences"][0]["kind"] == "Node"
        devices = spec["devices"]
        assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
        for device in devices:
            attributes = device["attributes"]
            assert attributes["type"] == {"string": "gpu"}
            assert attributes["uuid"]["string"].startswith("GPU-")
            assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
            assert attributes["architecture"] == {"string": "Hopper"}
            assert "index" not in attributes
            assert device["capacity"]["memory"]["value"] == "81559Mi"
        roots = [d["attributes"][dra.PCIE_ROOT_ATTRIBUTE]["string"] for d in devices]
        assert roots == ["pci0000:00"] * 4 + ["pci0000:80"] * 4
        assert len({d["attributes"][dra.PCI_BUS_ID_ATTRIBUTE]["string"] for d in devices}) == 8
    custom = _custom(dra_kube)
    device_class = dra_kube.run(custom.get_cluster_custom_object(*RESOURCE, "deviceclasses", "gpu.nvidia.com"))
    assert "gpu.nvidia.com" in device_class["spec"]["selectors"][0]["cel"]["expression"]
    nodes = dra_kube.run(dra_kube.core.list_node()).items
    assert nodes and all("nvidia.com/gpu" not in (n.status.allocatable or {}) for n in nodes)
    # DeviceTaintRule is served (resource.k8s.io/v1beta2 turned on for device taints).
    rules = dra_kube.run(_custom(dra_kube).list_cluster_custom_object("resource.k8s.io", "v1beta2", "devicetaintrules"))
    assert rules["items"] == []


def test_operator_places_a_job_on_gpus_it_reads_from_slices(dra_pjs: Jobs, dra_kube: KubeSession) -> None:
    dra_pjs.create("slices", tp=8, pp=1, dp=2, gpuProduct="NVIDIA-H100-80GB-HBM3")
    status = dra_pjs.wait_phase("slices", "Running", timeout_s=60)
    assert_gang_on_record(dra_pjs, "slices")
    assert_no_gpu_used_twice(dra_kube)
    pods = status["placement"]["pods"]
    assert len({p["node"] for p in pods}) == 2
    assert all(p["gpuIndices"] == list(range(8)) for p in pods)


def _hold(kube: KubeSession, namespace: str, name: str, node: str, devices: list[str]) -> None:
    """A claim allocated by someone else (kube-scheduler, say): spec first, then status.allocation."""
    custom = _custom(kube)
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": len(devices),
                        },
                    }
                ]
            }
        },
    }
    created = kube.run(custom.create_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims", body))
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devices
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    kube.run(custom.replace_namespaced_custom_object_status(*RESOURCE, namespace, "resourceclaims", name, created))


def test_devices_allocated_in_other_claims_count_as_used(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, dra_namespace: str
) -> None:
    busy, free = dra_cluster.nodes[:3], dra_cluster.nodes[3]
    for node_name in busy:
        _hold(dra_kube, dra_namespace, f"held-{node_name}", node_name, ["gpu-0", "gpu-5"])
    # Eight GPUs in one node: only the node nobody's claim touches has them.
    dra_pjs.create("whole", tp=8, pp=1, dp=1)
    whole = dra_pjs.wait_phase("whole", "Running", timeout_s=60)
    assert [p["node"] for p in whole["placement"]["pods"]] == [free]
    # Six more fit beside each claim; never on the claimed devices.
    dra_pjs.create("beside", tp=2, pp=1, dp=3)
    beside = dra_pjs.wait_phase("beside", "Running", timeout_s=60)
    for pod in beside["placement"]["pods"]:
        assert pod["node"] in busy and not {0, 5} & set(pod["gpuIndices"]), pod
    assert_no_gpu_used_twice(dra_kube)
    # A job that needs a whole node more cannot run until a claim lets go of its devices.
    dra_pjs.create("waits", tp=8, pp=1, dp=1)
    dra_pjs.wait_phase("waits", "Queued", timeout_s=30)
    dra_pjs.delete("beside")
    dra_kube.run(
        _custom(dra_kube).delete_namespaced_custom_object(
            *RESOURCE, dra_namespace, "resourceclaims", f"held-{busy[0]}"
        )
    )
    waits = dra_pjs.wait_phase("waits", "Running", timeout_s=60)
    assert [p["node"] for p in waits["placement"]["pods"]] == [busy[0]]

"""Helpers shared by the DRA end-to-end tests: reading ResourceClaims and checking them against the placement
the operator recorded, on a dev cluster started with ``--gpu-api dra``."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import CustomObjectsApi
from pjhelpers import Jobs

from paralleljob.devcluster.session import KubeSession

RESOURCE = ("resource.k8s.io", "v1")
TAINT_RULES = ("resource.k8s.io", "v1beta2", "devicetaintrules")


def custom(kube: KubeSession) -> Any:
    return CustomObjectsApi(kube.api)


def claims(kube: KubeSession, namespace: str) -> dict[str, dict[str, Any]]:
    listed = kube.run(custom(kube).list_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims"))
    return {item["metadata"]["name"]: item for item in listed["items"]}


def claim_devices(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """(pool, device) of every result in the claim's allocation; empty while it is not allocated."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", [])]


def allocated_devices(kube: KubeSession) -> list[tuple[str, str]]:
    """Every (pool, device) in any allocated claim of the cluster, once per claim that names it."""
    listed = kube.run(custom(kube).list_cluster_custom_object(*RESOURCE, "resourceclaims"))
    return [device for item in listed["items"] for device in claim_devices(item)]


def assert_no_device_in_two_claims(kube: KubeSession) -> list[tuple[str, str]]:
    devices = allocated_devices(kube)
    twice = sorted({d for d in devices if devices.count(d) > 1})
    assert not twice, f"devices allocated in two claims: {twice}"
    return devices


def assert_claims_match_placement(pjs: Jobs, kube: KubeSession, name: str) -> dict[str, Any]:
    """Each worker: no nvidia.com/gpu request, references its claim; the claim allocated with exactly the
    recorded GPUs' devices on the pod's node and reserved for that pod."""
    status = pjs.status(name)
    record = {p["name"]: p for p in status["placement"]["pods"]}
    by_name = claims(kube, pjs.namespace)
    used: list[tuple[str, str]] = []
    for pod in pjs.live_pods(name):
        slot = record[pod.metadata.name]
        assert pod.spec.node_name == slot["node"]
        container = pod.spec.containers[0]
        assert "nvidia.com/gpu" not in (container.resources.limits or {})
        assert [c.name for c in container.resources.claims] == ["gpus"]
        (reference,) = pod.spec.resource_claims
        claim = by_name[reference.resource_claim_name]
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(r["driver"], r["pool"]) for r in results] == [("gpu.nvidia.com", slot["node"])] * len(results)
        assert [r["device"] for r in results] == [f"gpu-{i}" for i in slot["gpuIndices"]]
        terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        assert terms[0]["matchFields"][0]["values"] == [slot["node"]]
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": pod.metadata.name, "uid": pod.metadata.uid}
        ]
        used += [(slot["node"], r["device"]) for r in results]
    assert len(used) == len(set(used)), f"a device is in two claims: {used}"
    return status


def hold_devices(kube: KubeSession, namespace: str, name: str, node: str, devices: list[str]) -> None:
    """A claim allocated by someone else, written as a DRA scheduler would: spec first, then its allocation."""
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
    created = kube.run(custom(kube).create_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims", body))
    results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d} for d in devices]
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    created["status"] = {"allocation": {"devices": {"results": results}, "nodeSelector": selector}}
    kube.run(
        custom(kube).replace_namespaced_custom_object_status(*RESOURCE, namespace, "resourceclaims", name, created)
    )


def taint_gpu(kube: KubeSession, made: list[str], name: str, node: str, gpu: int) -> None:
    """A DeviceTaintRule ``name`` (NoExecute) on GPU ``gpu`` of ``node``'s pool, added to ``made`` (the
    ``taint_rules`` fixture's list, deleted after the test)."""
    body = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{gpu}"},
            "taint": {"key": "e2e.paralleljob.dev/broken", "effect": "NoExecute"},
        },
    }
    kube.run(custom(kube).create_cluster_custom_object(*TAINT_RULES, body))
    made.append(name)

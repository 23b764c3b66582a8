"""Raw Kubernetes objects (plain dicts, as the API returns them) for the operator's pure unit tests."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from paralleljob.k8s.edge.constants import API_VERSION, GPU_RESOURCE, KIND

_rv = itertools.count(100)


def node(
    name: str,
    gpus: int = 8,
    *,
    leaf: str = "leaf-00",
    spine: str = "spine-00",
    zone: str = "zone-0",
    ready: bool = True,
    memory_mib: str = "81559",
    product: str = "NVIDIA-H100-80GB-HBM3",
    unhealthy: str | None = None,
    taints: list[dict[str, str]] | None = None,
    cordoned: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    annotations = {"paralleljob.dev/unhealthy-gpus": unhealthy} if unhealthy is not None else {}
    all_labels = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": memory_mib,
        "nvidia.com/gpu.count": str(gpus),
        "network.topology.nvidia.com/leaf": leaf,
        "network.topology.nvidia.com/spine": spine,
        "topology.kubernetes.io/zone": zone,
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(next(_rv)),
            "labels": all_labels,
            "annotations": annotations,
        },
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {
            "allocatable": {GPU_RESOURCE: str(gpus), "cpu": "96"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
        },
    }


def paralleljob(
    name: str,
    tp: int = 4,
    pp: int = 2,
    dp: int = 2,
    *,
    namespace: str = "ns",
    memory: float = 40.0,
    strategy: str = "minimal",
    max_restarts: int = 3,
    on_unplaceable: str = "Requeue",
    priority: int = 0,
    queue: str = "default",
    created: str = "2024-01-01T00:00:00Z",
    status: dict[str, Any] | None = None,
    extra_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "generation": 1,
            "resourceVersion": str(next(_rv)),
            "creationTimestamp": created,
        },
        "spec": {
            "parallelism": {"tensor": tp, "pipeline": pp, "data": dp},
            "gpuMemoryGiB": memory,
            "queue": queue,
            "priority": priority,
            "costModel": "seed",
            "failurePolicy": {"strategy": strategy, "maxRestarts": max_restarts, "onUnplaceable": on_unplaceable},
            "template": {"spec": {"containers": [{"name": "train", "image": "example/train:1"}]}},
            **(extra_spec or {}),
        },
        "status": status or {},
    }


def with_status(job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    out["status"] = status
    out["metadata"]["resourceVersion"] = str(next(_rv))
    return out


def pod_from_manifest(manifest: dict[str, Any], node_name: str = "", phase: str = "Pending") -> dict[str, Any]:
    """What the API would hold after creating ``manifest`` (and binding it to ``node_name``)."""
    pod = copy.deepcopy(manifest)
    pod["metadata"]["uid"] = f"uid-pod-{pod['metadata']['name']}-{next(_rv)}"
    pod["metadata"]["resourceVersion"] = str(next(_rv))
    if node_name:
        pod["spec"]["nodeName"] = node_name
    pod["status"] = {"phase": phase}
    return pod


def foreign_pod(name: str, node_name: str, gpus: int, namespace: str = "other") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": str(next(_rv))},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }

"""Failure injection on the dev cluster's fake GPU nodes, for the e2e tests and the demo.

Each failure is one the operator must notice through the API, exactly as on a real cluster:

- :func:`make_node_not_ready` — kwok's chaos label; kwok flips the node's Ready condition to False.
- :func:`delete_node` — the Node object disappears (pods bound to it stay: there is no pod GC).
- :func:`set_unhealthy_gpus` — the ``paralleljob.dev/unhealthy-gpus`` annotation the health agent writes.
- :func:`set_gpu_healthy_condition` — the health agent's ``GPUHealthy`` node condition.

:func:`heal_node` undoes the chaos on one node; :func:`restore_nodes` puts every node back as ``up`` made it
(re-created, original labels, schedulable, untainted), so a test leaves the shared cluster as it found it.
All functions take a kubernetes_asyncio ``ApiClient`` (see :func:`paralleljob.devcluster.kubeconfig.api_client`).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from paralleljob.devcluster.kwok import NOT_READY_LABEL, NOT_READY_MESSAGE_ANNOTATION, NOT_READY_REASON_ANNOTATION
from paralleljob.devcluster.nodes import (
    GPU_HEALTHY_CONDITION,
    UNHEALTHY_GPUS_ANNOTATION,
    NodeShape,
    create_gpu_nodes,
    gpu_node_manifest,
    wait_nodes_ready,
)

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient


def _core(api: ApiClient) -> Any:
    from kubernetes_asyncio.client import CoreV1Api

    return CoreV1Api(api)


async def make_node_not_ready(
    api: ApiClient, node: str, reason: str = "KubeletStopped", message: str = "injected by paralleljob chaos"
) -> None:
    """Ask kwok to turn ``node`` NotReady (takes effect in about a second; see :func:`wait_node_ready`)."""
    patch = {
        "metadata": {
            "labels": {NOT_READY_LABEL: "true"},
            "annotations": {NOT_READY_REASON_ANNOTATION: reason, NOT_READY_MESSAGE_ANNOTATION: message},
        }
    }
    await _core(api).patch_node(node, patch)


async def set_unhealthy_gpus(api: ApiClient, node: str, gpu_indices: Iterable[int]) -> None:
    """Write the health agent's annotation (comma-separated GPU indices); an empty set removes it."""
    indices = sorted(set(gpu_indices))
    value = ",".join(str(i) for i in indices) if indices else None
    await _core(api).patch_node(node, {"metadata": {"annotations": {UNHEALTHY_GPUS_ANNOTATION: value}}})


async def set_gpu_healthy_condition(
    api: ApiClient, node: str, healthy: bool, reason: str = "XID79", message: str = "GPU has fallen off the bus"
) -> None:
    """Write the ``GPUHealthy`` node condition as the health agent does (kwok's heartbeats keep it)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": GPU_HEALTHY_CONDITION,
        "status": "True" if healthy else "False",
        "reason": "GPUsHealthy" if healthy else reason,
        "message": "all GPUs healthy" if healthy else message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    await _core(api).patch_node_status(node, {"status": {"conditions": [condition]}})


async def delete_node(api: ApiClient, node: str) -> None:
    await _core(api).delete_node(node)


async def heal_node(api: ApiClient, node: str) -> None:
    """Remove the chaos label and the unhealthy-GPU annotation; kwok makes the node Ready again."""
    patch = {
        "metadata": {
            "labels": {NOT_READY_LABEL: None},
            "annotations": {
                NOT_READY_REASON_ANNOTATION: None,
                NOT_READY_MESSAGE_ANNOTATION: None,
                UNHEALTHY_GPUS_ANNOTATION: None,
            },
        }
    }
    await _core(api).patch_node(node, patch)


async def node_ready_condition(api: ApiClient, node: str) -> Any | None:
    """The node's Ready condition object (``.status``, ``.reason``, ``.message``), or None."""
    current = await _core(api).read_node(node)
    for condition in (current.status.conditions or []) if current.status else []:
        if condition.type == "Ready":
            return condition
    return None


async def wait_node_ready(api: ApiClient, node: str, ready: bool = True, timeout_s: float = 30.0) -> None:
    """Wait until ``node``'s Ready condition is True (``ready``) or False/Unknown (``not ready``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        condition = await node_ready_condition(api, node)
        is_ready = condition is not None and condition.status == "True"
        if is_ready == ready:
            return
        if time.monotonic() > deadline:
            want = "Ready" if ready else "NotReady"
            raise TimeoutError(f"node {node} not {want} after {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


async def reset_node(api: ApiClient, shape: NodeShape, index: int) -> None:
    """Put node ``index`` back as ``up`` made it: chaos undone, original labels, schedulable, untainted,
    and no ``GPUHealthy`` condition (labels a test added on top are left alone)."""
    name = shape.node_name(index)
    await heal_node(api, name)
    labels = gpu_node_manifest(shape, index)["metadata"]["labels"]
    await _core(api).patch_node(name, {"metadata": {"labels": labels}, "spec": {"unschedulable": None, "taints": None}})
    delete_condition = {"status": {"conditions": [{"type": GPU_HEALTHY_CONDITION, "$patch": "delete"}]}}
    await _core(api).patch_node_status(name, delete_condition)


async def restore_nodes(api: ApiClient, shape: NodeShape, timeout_s: float = 60.0) -> None:
    """Re-create deleted nodes, reset the others (:func:`reset_node`), and wait until all are Ready."""
    existing = {node.metadata.name for node in (await _core(api).list_node()).items}
    missing = [i for i, name in enumerate(shape.names()) if name not in existing]
    await create_gpu_nodes(api, shape, missing)
    for index, name in enumerate(shape.names()):
        if name in existing:
            await reset_node(api, shape, index)
    await wait_nodes_ready(api, shape.names(), timeout_s)

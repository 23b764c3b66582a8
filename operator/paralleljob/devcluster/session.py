"""A synchronous handle on a dev cluster for tests and scripts that are not themselves async.

:class:`KubeSession` runs coroutines on one private event loop with one shared kubernetes_asyncio
``ApiClient``, and wraps the chaos helpers so a test reads ``session.make_node_not_ready("gpu-node-001")``.
:func:`bind_pod` shows the one delicate client call: ``pods/binding`` must be read raw
(``_preload_content=False``), because the generated client cannot deserialize the Status the API
server answers with.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from paralleljob.devcluster import chaos
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.k8s.runtime.api import SSL_CLOSE_S

if TYPE_CHECKING:
    from pathlib import Path

    from kubernetes_asyncio.client import ApiClient

T = TypeVar("T")


async def bind_pod(api: ApiClient, namespace: str, pod: str, uid: str, node: str) -> tuple[int, dict[str, Any]]:
    """Bind ``pod`` to ``node`` with the pod's UID as precondition; returns (HTTP status, response body).

    Does not raise on an error status: a refused bind (409 for a stale UID or an already bound pod) is an
    ordinary outcome for a gang scheduler, which then rolls back.
    """
    from kubernetes_asyncio.client import CoreV1Api

    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    core: Any = CoreV1Api(api)
    response = await core.create_namespaced_pod_binding(pod, namespace, body, _preload_content=False)
    try:
        payload = await response.read()
    finally:
        response.release()
    return response.status, json.loads(payload) if payload else {}


class KubeSession:
    """One event loop and one API client for the life of a test session (call :meth:`close`)."""

    def __init__(self, kubeconfig: Path | str, shape: NodeShape | None = None) -> None:
        self.shape = shape or NodeShape()
        self._runner = asyncio.Runner()
        self.api: ApiClient = self._runner.run(self._open(str(kubeconfig)))
        from kubernetes_asyncio.client import CoreV1Api

        # Any: the generated API accepts dict bodies although its annotations name model classes.
        self.core: Any = CoreV1Api(self.api)

    @staticmethod
    async def _open(kubeconfig: str) -> ApiClient:
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return client.ApiClient(configuration)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coroutine)

    def __enter__(self) -> KubeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.run(self.api.close())
        self.run(asyncio.sleep(SSL_CLOSE_S))  # SSL transports finish closing first (k8s/runtime/api.Kube.close)
        self._runner.close()

    def bind_pod(self, namespace: str, pod: str, uid: str, node: str) -> tuple[int, dict[str, Any]]:
        return self.run(bind_pod(self.api, namespace, pod, uid, node))

    def make_node_not_ready(self, node: str, reason: str = "KubeletStopped") -> None:
        self.run(chaos.make_node_not_ready(self.api, node, reason))

    def set_unhealthy_gpus(self, node: str, gpu_indices: Iterable[int]) -> None:
        self.run(chaos.set_unhealthy_gpus(self.api, node, gpu_indices))

    def set_gpu_healthy_condition(self, node: str, healthy: bool, reason: str = "XID79") -> None:
        self.run(chaos.set_gpu_healthy_condition(self.api, node, healthy, reason))

    def delete_node(self, node: str) -> None:
        self.run(chaos.delete_node(self.api, node))

    def heal_node(self, node: str) -> None:
        self.run(chaos.heal_node(self.api, node))

    def wait_node_ready(self, node: str, ready: bool = True, timeout_s: float = 30.0) -> None:
        self.run(chaos.wait_node_ready(self.api, node, ready, timeout_s))

    def restore_nodes(self, timeout_s: float = 60.0) -> None:
        self.run(chaos.restore_nodes(self.api, self.shape, timeout_s))

"""The agent's only API calls, on its own Node: read it, merge-patch its annotations, strategic-merge-patch
its ``GPUHealthy`` condition (``status.conditions`` merges by type, so kubelet's conditions are untouched);
and on a DRA node, list the node's ResourceSlices and keep its DeviceTaintRules (``taintrules.py``).

kubernetes_asyncio with raw JSON in and out, as the operator does; in a pod the service account is used,
elsewhere ``--kubeconfig`` / ``$KUBECONFIG``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from paralleljob.shellkit.kubeconfig import load_configuration, unreachable


class NodeApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)  # 0: no HTTP answer at all
        self.status = status


class NodeClient:
    def __init__(self, api: client.ApiClient, node: str) -> None:
        self.api = api
        self.node = node
        self.core: Any = client.CoreV1Api(api)  # Any: dict bodies, raw responses
        self.custom: Any = client.CustomObjectsApi(api)
        self.rules_version = ""  # DeviceTaintRules' API version, found by the first list (v1 from 1.37)

    @classmethod
    async def connect(cls, node: str, kubeconfig: str | None = None) -> NodeClient:
        return cls(client.ApiClient(await load_configuration(kubeconfig)), node)

    async def close(self) -> None:
        await self.api.close()

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # _preload_content=False: the raw response, errors included (the generated models are not needed).
        try:
            response = await method(*args, _preload_content=False, _request_timeout=30, **kwargs)
            try:
                data, status = await response.read(), int(response.status)
            finally:
                response.release()
        except client.ApiException as exc:
            raise NodeApiError(int(exc.status or 0), str(exc.reason)) from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            # as the operator and the CLI say it: the server, the cause in words, what to check
            raise NodeApiError(0, unreachable(str(self.api.configuration.host), exc)) from None
        text = data.decode(errors="replace") if data else ""
        if not 200 <= status < 300:
            raise NodeApiError(status, _message(text) or f"{method.__name__} failed")
        body = json.loads(text) if text else {}
        return body if isinstance(body, dict) else {}

    async def get(self) -> dict[str, Any]:
        return await self._call(self.core.read_node, self.node)

    async def patch_annotations(self, changes: Mapping[str, str | None], resource_version: str) -> dict[str, Any]:
        """Merge patch with the resourceVersion read: a concurrent writer (the CLI's drain) gets a 409, not lost."""
        body = {"metadata": {"resourceVersion": resource_version, "annotations": dict(changes)}}
        return await self._call(self.core.patch_node, self.node, body, _content_type="application/merge-patch+json")

    async def patch_status(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call(
            self.core.patch_node_status, self.node, dict(patch), _content_type="application/strategic-merge-patch+json"
        )

    async def list_slices(self) -> list[dict[str, Any]]:
        """This node's ResourceSlices (every driver's; the caller picks its driver)."""
        body = await self._call(
            self.custom.list_cluster_custom_object,
            "resource.k8s.io",
            "v1",
            "resourceslices",
            field_selector=f"spec.nodeName={self.node}",
        )
        return [i for i in body.get("items") or [] if isinstance(i, dict)]

    async def list_rules(self, label_selector: str) -> list[dict[str, Any]]:
        """This node's DeviceTaintRules, in the newest version the server serves (asked until one answers: a
        404 of every version is the caller's "no DeviceTaintRules here")."""
        versions = (self.rules_version,) if self.rules_version else RULES_VERSIONS
        for version in versions:
            try:
                body = await self._call(
                    self.custom.list_cluster_custom_object, RULES_GROUP, version, RULES, label_selector=label_selector
                )
            except NodeApiError as exc:
                if exc.status == 404 and version != versions[-1]:
                    continue
                raise
            self.rules_version = version
            return [i for i in body.get("items") or [] if isinstance(i, dict)]
        return []

    def _rule(self, body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        version = self.rules_version or RULES_VERSIONS[-1]
        return version, {**body, "apiVersion": f"{RULES_GROUP}/{version}"}

    async def create_rule(self, body: Mapping[str, Any]) -> None:
        version, sent = self._rule(body)
        await self._call(self.custom.create_cluster_custom_object, RULES_GROUP, version, RULES, sent)

    async def replace_rule(self, body: Mapping[str, Any]) -> None:
        """A full update carrying the resourceVersion read (409 when someone else changed it meanwhile)."""
        version, sent = self._rule(body)
        name = body["metadata"]["name"]
        await self._call(self.custom.replace_cluster_custom_object, RULES_GROUP, version, RULES, name, sent)

    async def delete_rule(self, name: str) -> None:
        version = self.rules_version or RULES_VERSIONS[-1]
        try:
            await self._call(self.custom.delete_cluster_custom_object, RULES_GROUP, version, RULES, name)
        except NodeApiError as exc:
            if exc.status != 404:  # already gone: what was wanted
                raise


RULES_GROUP = "resource.k8s.io"
RULES = "devicetaintrules"
RULES_VERSIONS = ("v1", "v1beta2")  # GA in 1.37; beta behind DRADeviceTaintRules in 1.36


def _message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200]
    return str(data.get("message", "")) if isinstance(data, dict) else ""

"""Test doubles for the agent: an in-memory Node with the API server's patch semantics, and script helpers."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from paralleljob.agent.fake import FakeNvml, parse_script
from paralleljob.agent.kube import NodeApiError
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import NodeInfo, parse_node
from tests.k8s.factories import node


def fake_nvml(steps: list[dict[str, Any]], gpus: int = 8, **defaults: Any) -> FakeNvml:
    return FakeNvml(parse_script({"gpus": gpus, "defaults": defaults, "steps": steps}), sleep=lambda _: None)


class FakeNode:
    """One Node behind get / merge-patch / strategic-merge-patch, with resourceVersion conflicts.

    ``history`` keeps the node as the operator would parse it after every write, so a test can check every
    intermediate state, not only the last one."""

    def __init__(self, name: str = "gpu-node-000", gpus: int = 8) -> None:
        self.body = node(name, gpus)
        self.rv = 1
        self.body["metadata"]["resourceVersion"] = "1"
        self.history: list[NodeInfo] = []
        self.conflict_next = 0  # answer 409 to this many annotation patches
        self.fail_next = 0  # answer 500 to this many calls
        self.calls: list[str] = []

    def _bump(self) -> None:
        self.rv += 1
        self.body["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append(self.info())

    def info(self) -> NodeInfo:
        return parse_node(self.body, TopologyConfig())

    def _maybe_fail(self) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise NodeApiError(500, "injected")

    async def get(self) -> dict[str, Any]:
        self.calls.append("get")
        self._maybe_fail()
        return copy.deepcopy(self.body)

    async def patch_annotations(self, changes: Mapping[str, str | None], resource_version: str) -> dict[str, Any]:
        self.calls.append("annotations")
        self._maybe_fail()
        if self.conflict_next:
            self.conflict_next -= 1
            self._bump()  # somebody else wrote in between
            raise NodeApiError(409, "the object has been modified")
        if resource_version and resource_version != str(self.rv):
            raise NodeApiError(409, "the object has been modified")
        annotations = self.body["metadata"].setdefault("annotations", {})
        for key, value in changes.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        self._bump()
        return copy.deepcopy(self.body)

    async def patch_status(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append("status")
        self._maybe_fail()
        conditions = self.body["status"].setdefault("conditions", [])
        for new in patch["status"]["conditions"]:  # strategic merge: by type
            for i, old in enumerate(conditions):
                if old["type"] == new["type"]:
                    conditions[i] = {**old, **new}
                    break
            else:
                conditions.append(dict(new))
        self._bump()
        return copy.deepcopy(self.body)

    async def close(self) -> None:
        pass

    def annotation(self, key: str) -> str | None:
        value = self.body["metadata"].get("annotations", {}).get(key)
        return None if value is None else str(value)

    def condition(self) -> dict[str, Any] | None:
        for c in self.body["status"].get("conditions", []):
            if c["type"] == "GPUHealthy":
                return dict(c)
        return None

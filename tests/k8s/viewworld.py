"""A small world of nodes, pods and claims that tests and the view benchmark change one event at a time,
feeding the same stores the reconciler feeds, so a kept view can be compared with a rebuild."""

from __future__ import annotations

import itertools
import json
from typing import Any

from paralleljob.core.rankorder import RankOrder
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import GPU_HEALTH_ANNOTATION, GPU_INDICES_ANNOTATION, GPU_RESOURCE, JOB_LABEL, KIND
from paralleljob.k8s.edge.parse.nodes import NodeInfo, parse_node
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.view.clusterview import Claim
from paralleljob.k8s.view.store import ObjectStore
from tests.k8s.factories import node

_versions = itertools.count(1_000_000)


def node_body(name: str, gpus: int, leaf: str = "leaf-0", **health: Any) -> dict[str, Any]:
    """A GPU node; ``health`` takes ready, unhealthy, cordoned, no_execute, degraded (one GPU index)."""
    taints = [{"key": "maintenance", "effect": "NoExecute"}] if health.get("no_execute") else None
    body = node(
        name,
        gpus,
        leaf=leaf,
        ready=health.get("ready", True),
        unhealthy=health.get("unhealthy"),
        cordoned=health.get("cordoned", False),
        taints=taints,
    )
    if health.get("degraded") is not None:
        body["metadata"]["annotations"][GPU_HEALTH_ANNOTATION] = json.dumps(
            {str(health["degraded"]): {"state": "Degraded"}}
        )
    return body


def pod_body(
    name: str,
    node_name: str,
    gpus: int,
    *,
    job: str | None = None,
    indices: tuple[int, ...] | None = None,
    phase: str = "Running",
    deleting: bool = False,
) -> dict[str, Any]:
    """A pod holding ``gpus`` GPUs on ``node_name``: a worker of ParallelJob ``job`` (uid ``uid-<job>``), or a
    foreign pod when ``job`` is None; ``indices`` become the gpu-indices annotation."""
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": {}, "labels": {}}
    if job is not None:
        metadata["labels"][JOB_LABEL] = job
        metadata["ownerReferences"] = [{"kind": KIND, "controller": True, "uid": f"uid-{job}", "name": job}]
    if indices is not None:
        metadata["annotations"][GPU_INDICES_ANNOTATION] = ",".join(str(i) for i in indices)
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def claim(job: str, slots: list[tuple[str, str, tuple[int, ...]]], uid: str | None = None) -> Claim:
    """A recorded placement of ``job`` (namespace ns): one slot per (pod name, node, GPU indices)."""
    record = PlacementRecord(
        epoch=1,
        cost_model="seed",
        tp=max(len(indices) for _, _, indices in slots),
        pp=1,
        dp=len(slots),
        slots=tuple(PodSlot(name, d, 0, node_name, indices) for d, (name, node_name, indices) in enumerate(slots)),
        rank_order=RankOrder.TP_DP_PP,
    )
    return Claim(f"ns/{job}", uid or f"uid-{job}", record)


class World:
    """The stores the reconciler keeps, changed the way watch events change them."""

    def __init__(self, config: TopologyConfig | None = None) -> None:
        self.config = config or TopologyConfig()
        self.nodes: ObjectStore[NodeInfo] = ObjectStore(lambda body: parse_node(body, self.config))
        self.pods: ObjectStore[PodInfo] = ObjectStore(parse_pod)
        self.claims: dict[str, Claim] = {}  # job key -> claim, in claim order

    def put(self, store: ObjectStore[Any], body: dict[str, Any]) -> None:
        body["metadata"]["resourceVersion"] = str(next(_versions))
        store.upsert(body)

    def delete(self, store: ObjectStore[Any], namespace: str, name: str) -> None:
        body = store.body(namespace, name)
        if body is not None:
            store.remove(body)

    def relist(self, store: ObjectStore[Any]) -> None:
        bodies = [store.body(*key) for key, _ in store.items()]
        store.replace_all([b for b in bodies if b is not None], str(next(_versions)))

    def claim_list(self) -> list[Claim]:
        return list(self.claims.values())

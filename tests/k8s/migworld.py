"""A cluster with a DRA node set up for MIG, for the pure pass's tests (issue 44): the node's Node object and
its pool in the partitionable shape the dev cluster publishes (``devcluster/migslices.py``), laid over the
harness's node parsing as the operator's DRA overlay lays it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from paralleljob.devcluster.migslices import mig_slice_manifests
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.k8s.edge.config import DraConfig, TopologyConfig
from paralleljob.k8s.edge.parse import nodes as node_parsing
from paralleljob.k8s.edge.parse.dra import overlay_nodes, parse_claim, parse_slice
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from tests.k8s import harness
from tests.k8s.factories import node

MIG_NODE = "mig-0"
SHAPE = NodeShape(count=1, gpu_api="dra")


def mig_pool(name: str = MIG_NODE) -> list[dict[str, Any]]:
    return mig_slice_manifests(SHAPE, name, f"uid-{name}")


def dra_node(name: str = MIG_NODE, unhealthy: str = "") -> dict[str, Any]:
    """A Node of a DRA cluster: no nvidia.com/gpu, no GFD labels (its GPUs are its pool's)."""
    body = node(name, 0, labels={"kubernetes.io/hostname": name}, unhealthy=unhealthy or None)
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count"):
        del body["metadata"]["labels"][key]
    return body


@contextmanager
def mig_overlay(
    claims: list[dict[str, Any]] | None = None, name: str = MIG_NODE, dropped: set[str] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """The harness parsing nodes through the DRA overlay with ``name``'s MIG pool and ``claims`` (bodies a
    test may append to while it runs); device names in ``dropped`` (a set the test may change) are left out
    of the pool, as a driver that no longer publishes them."""
    held = claims if claims is not None else []
    gone = dropped if dropped is not None else set()
    bodies = mig_pool(name)
    whole_pool = [parse_slice(item) for item in bodies]

    def parse(body: dict[str, Any], config: TopologyConfig) -> NodeInfo:
        info = node_parsing.parse_node(body, config)
        pool = [parse_slice(_without(item, gone)) for item in bodies] if gone else whole_pool
        return overlay_nodes([info], pool, [parse_claim(c) for c in held], DraConfig(), 80.0)[0]

    with mock.patch.object(harness, "parse_node", parse):
        yield held


def _without(body: dict[str, Any], names: set[str]) -> dict[str, Any]:
    if not names or "devices" not in body["spec"]:
        return body
    devices = [d for d in body["spec"]["devices"] if d["name"] not in names]
    return {**body, "spec": {**body["spec"], "devices": devices}}

"""The kept cluster view over DRA nodes (``dranodes.OverlaidNodes``): a slice or claim written changes the
nodes it concerns in place, and after every step the kept view equals a rebuild from the same stores."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from paralleljob.k8s.edge.config import DraConfig, TopologyConfig
from paralleljob.k8s.edge.parse.dra import ClaimInfo, SliceInfo, parse_claim, parse_slice
from paralleljob.k8s.edge.parse.nodes import NodeInfo, parse_node
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.view.clusterview import build_view
from paralleljob.k8s.view.dranodes import OverlaidNodes
from paralleljob.k8s.view.liveview import LiveView
from paralleljob.k8s.view.store import ObjectStore
from paralleljob.k8s.view.viewcheck import view_differences
from tests.k8s.test_dra import claim, dra_node, gpu, resource_slice
from tests.k8s.viewworld import node_body

CONFIG = TopologyConfig()
_versions = itertools.count(100)


class DraWorld:
    def __init__(self) -> None:
        self.nodes: ObjectStore[NodeInfo] = ObjectStore(lambda body: parse_node(body, CONFIG))
        self.pods: ObjectStore[PodInfo] = ObjectStore(parse_pod)
        self.slices: ObjectStore[SliceInfo] = ObjectStore(parse_slice)
        self.claims: ObjectStore[ClaimInfo] = ObjectStore(parse_claim)
        self.source = OverlaidNodes(self.nodes, self.slices, self.claims, DraConfig(), 80.0)

    def put(self, store: ObjectStore[Any], body: dict[str, Any]) -> None:
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(next(_versions))
        store.upsert(body)

    def delete(self, store: ObjectStore[Any], namespace: str, name: str) -> None:
        body = store.body(namespace, name)
        assert body is not None
        store.remove(body)

    def fresh(self) -> Any:
        nodes = OverlaidNodes(self.nodes, self.slices, self.claims, DraConfig(), 80.0).values()
        return build_view(nodes, self.pods.values(), [], CONFIG)


def _assert_equal(world: DraWorld, live: LiveView) -> Any:
    view = live.refresh([])
    assert view_differences(view, world.fresh()) == []
    return view


def test_slices_and_claims_are_patched_into_the_kept_view() -> None:
    world = DraWorld()
    world.put(world.nodes, node_body("a-plugin", 8))
    for name in ("b-dra", "c-dra"):
        world.put(world.nodes, dra_node(name))
        world.put(world.slices, resource_slice(name, [gpu(i) for i in range(8)]))
    live = LiveView(CONFIG, world.source, world.pods)
    view = _assert_equal(world, live)
    assert view.state.usable_free(view.node_index["b-dra"]) == 8

    held = [("gpu.nvidia.com", "b-dra", "gpu-0"), ("gpu.nvidia.com", "b-dra", "gpu-5")]
    world.put(world.claims, claim("theirs", held))
    view = _assert_equal(world, live)
    assert view.state.usable_free(view.node_index["b-dra"]) == 6

    world.put(world.claims, claim("theirs", [("gpu.nvidia.com", "c-dra", "gpu-1")]))  # re-allocated elsewhere
    view = _assert_equal(world, live)
    assert not view.empty
    assert view.state.usable_free(view.node_index["b-dra"]) == 8
    assert view.state.usable_free(view.node_index["c-dra"]) == 7

    tainted = gpu(3, taints=[{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}])
    world.put(world.slices, resource_slice("c-dra", [gpu(i) for i in range(8) if i != 3] + [tainted]))
    view = _assert_equal(world, live)
    assert view.state.usable_free(view.node_index["c-dra"]) == 6

    world.delete(world.claims, "team", "theirs")
    world.put(world.nodes, node_body("a-plugin", 8, cordoned=True))
    view = _assert_equal(world, live)
    assert view.state.usable_free(view.node_index["c-dra"]) == 7
    assert live.rebuilds == {"start": 1}, live.rebuilds  # all of it patched in, never rebuilt


def test_a_pool_growing_or_going_rebuilds_the_topology() -> None:
    world = DraWorld()
    world.put(world.nodes, dra_node("b-dra"))
    world.put(world.slices, resource_slice("b-dra", [gpu(i) for i in range(4)]))
    live = LiveView(CONFIG, world.source, world.pods)
    _assert_equal(world, live)
    world.put(world.slices, resource_slice("b-dra", [gpu(i) for i in range(8)], generation=2))
    view = _assert_equal(world, live)
    assert view.topology.node_gpu_count[view.node_index["b-dra"]] == 8
    world.delete(world.slices, "", "b-dra-gpu.nvidia.com-x7k2p")
    view = _assert_equal(world, live)
    assert "b-dra" not in view.node_index  # no slice, no GPUs: the node left the topology
    assert live.rebuilds.get("topology") == 2

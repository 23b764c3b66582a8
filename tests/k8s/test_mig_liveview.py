"""The kept view with MIG slices (issue 44): a sliced GPU is held by one ``sliced:`` holder whichever jobs'
slices are on it, so a slice record coming or going rebuilds the view, which always equals a rebuild."""

from __future__ import annotations

from dataclasses import replace

from paralleljob.k8s.edge.status.records import MigGrant
from paralleljob.k8s.view.clusterview import Claim, build_view, sliced_holder_id
from paralleljob.k8s.view.liveview import LiveView
from paralleljob.k8s.view.viewcheck import view_differences
from tests.k8s.viewworld import World, claim, node_body


def sliced(job: str, node: str, gpu: int, start: int) -> Claim:
    plain = claim(job, [(f"{job}-d0-p0", node, (gpu,))])
    slot = replace(plain.record.slots[0], mig=MigGrant("1g.10gb", start))
    return replace(plain, record=replace(plain.record, slots=(slot,)))


def test_slice_records_share_a_gpu_and_leaving_frees_it_only_with_the_last() -> None:
    world = World()
    for i in range(2):
        world.put(world.nodes, node_body(f"n{i}", 8))
    live = LiveView(world.config, world.nodes, world.pods)
    live.refresh([])
    world.claims["ns/a"] = sliced("a", "n1", 2, 0)
    world.claims["ns/b"] = sliced("b", "n1", 2, 1)
    world.claims["ns/w"] = claim("w", [("w-d0-p0", "n1", (0, 1))])
    view = live.refresh(world.claim_list())
    gpu = 8 + 2
    assert view.state.owner[gpu] == sliced_holder_id("n1", 2) and not view.conflicts
    assert set(view.loaded) == {"ns/a", "ns/b", "ns/w"}
    assert live.rebuilds.get("slices") == 1
    del world.claims["ns/a"]
    view = live.refresh(world.claim_list())
    assert view.state.owner[gpu] == sliced_holder_id("n1", 2), "b's slice is still there"
    del world.claims["ns/b"]
    view = live.refresh(world.claim_list())
    assert view.state.owner[gpu] is None
    assert live.rebuilds.get("slices") == 3
    fresh = build_view(world.nodes.values(), world.pods.values(), world.claim_list(), world.config)
    assert view_differences(view, fresh) == []


def test_a_slice_on_a_gpu_a_whole_job_holds_is_a_conflict() -> None:
    world = World()
    world.put(world.nodes, node_body("n0", 8))
    claims = [claim("w", [("w-d0-p0", "n0", (0, 1))]), sliced("a", "n0", 1, 0)]
    view = build_view(world.nodes.values(), world.pods.values(), claims, world.config)
    assert "ns/a" in view.conflicts and "whole" in view.conflicts["ns/a"]


def test_device_plugin_slice_records_come_and_go_without_a_rebuild() -> None:
    from tests.k8s.test_mig_pools import mig_node

    world = World()
    world.put(world.nodes, node_body("n0", 8))
    world.put(world.nodes, mig_node("mig-0", whole=4))
    world.put(world.nodes, mig_node("mig-1"))
    live = LiveView(world.config, world.nodes, world.pods)
    view = live.refresh([])
    assert set(view.pools) == {"mig-0", "mig-1"} and "mig-1" not in view.node_index
    plain = claim("p", [("p-d0-p0", "mig-1", ())])
    slot = replace(plain.record.slots[0], mig=MigGrant("1g.10gb", None))
    world.claims["ns/p"] = replace(plain, record=replace(plain.record, slots=(slot,)))
    view = live.refresh(world.claim_list())
    assert "ns/p" in view.loaded and not view.conflicts and "slices" not in live.rebuilds
    world.put(world.nodes, mig_node("mig-1", unhealthy="2"))  # a MIG node's change reaches the kept view
    view = live.refresh(world.claim_list())
    assert view.pools["mig-1"].unhealthy_gpus == frozenset({2})
    fresh = build_view(world.nodes.values(), world.pods.values(), world.claim_list(), world.config)
    assert view_differences(view, fresh) == []
    del world.claims["ns/p"]
    view = live.refresh(world.claim_list())
    assert "ns/p" not in view.loaded and "slices" not in live.rebuilds
    assert view_differences(view, build_view(world.nodes.values(), world.pods.values(), [], world.config)) == []

"""``GPUsOversubscribed`` only when the API shows it (issue 38, item 11).

A chaos run (27 operator kills) posted 32 Warnings "pod ... holds 8 GPUs, only 0 were free" while the API never
showed a GPU in two pods: a restarted operator's first look holds a record's GPUs for pods that are not on the
node (yet, or any more), so a pod that really is there found them taken. The view still keeps those GPUs from
new work; only a node whose own pods hold a GPU twice, or more GPUs than it has, is warned about."""

from __future__ import annotations

from paralleljob.k8s.view.clusterview import build_view
from paralleljob.k8s.view.liveview import LiveView
from tests.k8s.viewworld import World, claim, node_body, pod_body

EIGHT = tuple(range(8))


def _first_look(world: World) -> list[list[str]]:
    """The warnings of a restarted operator's first view, both ways it is made (rebuild and kept view)."""
    live = LiveView(world.config, world.nodes, world.pods)
    kept = live.refresh(world.claim_list())
    fresh = build_view(world.nodes.values(), world.pods.values(), world.claim_list(), world.config)
    return [kept.warnings, fresh.warnings]


def test_a_record_whose_pods_are_not_on_the_node_is_no_oversubscription() -> None:
    world = World()
    for name in ("n0", "n1"):
        world.put(world.nodes, node_body(name, 8))
    # The previous leader recorded "next" on n0 and was killed before its pods existed; a pod of a job that is
    # gone (its record with it) still runs there. The API shows one pod holding 8 GPUs of 8.
    world.claims["ns/next"] = claim("next", [("next-d0-p0", "n0", EIGHT)])
    world.put(world.pods, pod_body("old-d0-p0", "n0", 8, job="old", indices=EIGHT))
    for warnings in _first_look(world):
        assert warnings == [], warnings
    first = build_view(world.nodes.values(), world.pods.values(), world.claim_list(), world.config)
    assert {first.state.owner[g] for g in EIGHT} == {"ns/next"}, "the record still keeps its GPUs from new work"


def test_two_pods_on_the_same_gpus_are_still_reported() -> None:
    world = World()
    world.put(world.nodes, node_body("n0", 8))
    world.claims["ns/next"] = claim("next", [("next-d0-p0", "n0", EIGHT)])
    world.put(world.pods, pod_body("next-d0-p0", "n0", 8, job="next", indices=EIGHT))
    world.put(world.pods, pod_body("old-d0-p0", "n0", 8, job="old", indices=EIGHT))
    for warnings in _first_look(world):
        assert len(warnings) == 1 and "ns/old-d0-p0" in warnings[0] and "GPU 0" in warnings[0], warnings


def test_more_gpus_requested_than_the_node_has_are_reported_without_indices() -> None:
    world = World()
    world.put(world.nodes, node_body("n0", 8))
    world.put(world.pods, pod_body("web", "n0", 6))  # foreign pods: no GPU indices, only their requests
    world.put(world.pods, pod_body("batch", "n0", 4))
    for warnings in _first_look(world):
        assert len(warnings) == 1 and "10 GPUs" in warnings[0] and "ns/batch" in warnings[0], warnings

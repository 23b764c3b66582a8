"""The kept cluster view: what it patches, when it rebuilds, and the self-check that repairs it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from paralleljob.core.cluster import Allocation, GPUHealth
from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.plan.metrics_model import fragmentation_ratio
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.reconciler import Reconciler
from paralleljob.k8s.view import liveview
from paralleljob.k8s.view.clusterview import build_view
from paralleljob.k8s.view.liveview import LiveView
from paralleljob.k8s.view.viewcheck import CheckedView, view_differences
from tests.k8s.viewworld import World, claim, node_body, pod_body


def _world(nodes: int = 3) -> tuple[World, LiveView]:
    world = World()
    for i in range(nodes):
        world.put(world.nodes, node_body(f"n{i}", 8))
    live = LiveView(world.config, world.nodes, world.pods)
    live.refresh([])
    return world, live


def _fresh(world: World) -> object:
    return build_view(world.nodes.values(), world.pods.values(), world.claim_list(), world.config)


def test_a_pass_with_nothing_changed_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    world, live = _world()
    world.claims["ns/j"] = claim("j", [("j-d0-p0", "n1", (0, 1))])
    first = live.refresh(world.claim_list())
    monkeypatch.setattr(liveview, "build_view", lambda *a: pytest.fail("rebuilt although nothing changed"))
    assert live.refresh(world.claim_list()) is first
    assert live.rebuilds == {"start": 1}


def test_health_and_pods_are_patched_into_the_kept_view() -> None:
    world, live = _world()
    world.put(world.pods, pod_body("web", "n0", 2))
    world.put(world.nodes, node_body("n2", 8, unhealthy="3", cordoned=True))
    view = live.refresh([])
    assert live.rebuilds == {"start": 1}
    assert view.state.owner[0] == "pod:ns/web"
    assert view.state.health[16 + 3] is GPUHealth.OFFLINE and not view.state.node_schedulable[2]
    assert view_differences(view, _fresh(world)) == []  # type: ignore[arg-type]


def test_pods_on_one_node_take_their_gpus_in_the_stores_order() -> None:
    world, live = _world()
    world.put(world.pods, pod_body("early", "", 2))  # created first, bound last, no GPU indices
    world.put(world.pods, pod_body("late", "n0", 2, indices=(0, 1)))
    live.refresh([])
    world.put(world.pods, pod_body("early", "n0", 2))
    view = live.refresh([])
    assert view.state.owner[:4] == ["pod:ns/early"] * 2 + ["pod:ns/late"] * 2
    assert view_differences(view, _fresh(world)) == []  # type: ignore[arg-type]


def test_a_claim_explains_its_pods_and_frees_them_when_it_goes() -> None:
    world, live = _world()
    world.put(world.pods, pod_body("j-d0-p0", "n1", 2, job="j", indices=(4, 5)))
    view = live.refresh([])
    assert view.occupants == {"n1": ["ns/j-d0-p0"]}
    world.claims["ns/j"] = claim("j", [("j-d0-p0", "n1", (4, 5))])
    view = live.refresh(world.claim_list())
    assert view.occupants == {} and view.loaded.keys() == {"ns/j"}
    assert view_differences(view, _fresh(world)) == []  # type: ignore[arg-type]
    world.claims.clear()
    view = live.refresh([])
    assert view.occupants == {"n1": ["ns/j-d0-p0"]} and live.rebuilds == {"start": 1}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda w: w.put(w.nodes, node_body("n9", 8)), "topology"),
        (lambda w: w.put(w.nodes, node_body("n0", 4)), "topology"),
        (lambda w: w.relist(w.pods), "relist"),
        (lambda w: w.claims.update({"ns/g": claim("g", [("g-d0-p0", "gone", (0,))])}), "topology"),
    ],
)
def test_what_cannot_be_patched_is_rebuilt(change: object, why: str) -> None:
    world, live = _world()
    change(world)  # type: ignore[operator]
    view = live.refresh(world.claim_list())
    assert live.rebuilds.get(why) == 1
    assert view_differences(view, _fresh(world)) == []  # type: ignore[arg-type]


def test_a_pass_tries_decisions_out_and_the_view_survives_it() -> None:
    world, live = _world()
    view = live.refresh([])
    assert not view.empty
    view.state.begin_trial()
    view.state.allocate(Allocation("ns/new", ((8, 9, 10, 11),), 40.0))
    view.state.set_health(0, GPUHealth.OFFLINE)
    view.state.rollback()
    assert view_differences(live.refresh([]), _fresh(world)) == []  # type: ignore[arg-type]


def test_the_self_check_counts_a_mismatch_and_adopts_the_rebuild() -> None:
    _, live = _world()
    metrics = Metrics()
    checked = CheckedView(live, every_passes=2, every_seconds=0, on_mismatch=lambda d: metrics.view_mismatches.inc())
    kept = checked.refresh([])
    assert not kept.empty
    kept.state.allocate(Allocation("ns/phantom", ((0, 1),), 0.0))  # a patching bug would look like this
    assert checked.refresh([]) is not kept  # the second pass checks, finds it, and adopts the rebuild
    assert checked.checks == 1 and checked.mismatches == 1
    assert metrics.registry.get_sample_value("paralleljob_view_rebuild_mismatches_total") == 1.0
    assert live.view is not None and "ns/phantom" not in live.view.state.allocations
    checked.refresh([])
    checked.refresh([])
    assert checked.checks == 2 and checked.mismatches == 1  # the adopted view is right


def test_the_self_check_runs_by_time_too() -> None:
    now = [0.0]
    _, live = _world()
    checked = CheckedView(live, every_passes=0, every_seconds=30.0, clock=lambda: now[0])
    checked.refresh([])
    assert checked.checks == 0
    now[0] = 31.0
    checked.refresh([])
    assert checked.checks == 1 and checked.mismatches == 0


def test_the_reconciler_keeps_its_view_across_passes_and_rebuilds_after_a_relist() -> None:
    async def scenario() -> Reconciler:
        metrics = Metrics()
        reconciler = Reconciler(cast(Any, object()), OperatorConfig(view_check_passes=1), metrics)
        for i in range(3):
            reconciler.on_event("node", "ADDED", node_body(f"n{i}", 8))
        reconciler.on_event("pod", "ADDED", pod_body("web", "n0", 2))
        await reconciler.pass_once()
        reconciler.on_event("node", "MODIFIED", node_body("n1", 8, unhealthy="0"))
        await reconciler.pass_once()
        kept = reconciler.view.live.view
        assert kept is not None and not kept.state.in_trial
        assert kept.state.health[8] is GPUHealth.OFFLINE and kept.state.owner[0] == "pod:ns/web"
        relisted = pod_body("web", "n0", 2)
        relisted["metadata"]["resourceVersion"] = "1"
        reconciler.on_list("pod", [relisted], "2")  # the pod reflector re-listed
        await reconciler.pass_once()
        return reconciler

    reconciler = asyncio.run(scenario())
    samples = reconciler.metrics.registry
    assert samples.get_sample_value("paralleljob_view_rebuilds_total", {"reason": "start"}) == 1.0
    assert samples.get_sample_value("paralleljob_view_rebuilds_total", {"reason": "relist"}) == 1.0
    assert reconciler.view.checks == 1 and reconciler.view.mismatches == 0  # checked on the patched pass
    assert samples.get_sample_value("paralleljob_view_rebuild_mismatches_total") == 0.0


def test_fragmentation_is_read_from_the_counters_and_equals_a_count_per_node() -> None:
    world, live = _world(4)
    world.put(world.pods, pod_body("web", "n0", 2))
    world.put(world.nodes, node_body("n1", 8, unhealthy="0"))
    world.put(world.nodes, node_body("n2", 8, cordoned=True))
    assert fragmentation_ratio(live.refresh([])) == (6 + 7) / (6 + 7 + 8)
    world.put(world.nodes, node_body("n3", 4))  # mixed GPU counts: counted node by node
    assert fragmentation_ratio(live.refresh([])) == (6 + 7) / (6 + 7 + 4)


def test_a_rebuild_that_fails_leaves_no_stale_view_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    world, live = _world()
    world.put(world.nodes, node_body("n9", 8))  # a new node: the next refresh rebuilds

    def broken(*args: object) -> None:
        raise RuntimeError("the build failed")

    monkeypatch.setattr(liveview, "build_view", broken)
    with pytest.raises(RuntimeError):
        live.refresh([])
    monkeypatch.undo()
    assert view_differences(live.refresh([]), _fresh(world)) == []  # type: ignore[arg-type]
    assert live.rebuilds == {"start": 2}


def test_a_repair_that_reuses_its_own_gpus_while_the_old_pod_leaves_is_no_oversubscription() -> None:
    """Chaos finding: "node X is oversubscribed: pod ... holds 1 GPUs, only 0 were free" hundreds of times
    during repairs, while the API never showed a GPU in two pods. A full repair may put a slot on GPUs of
    the job's own old pod (another slot, an earlier incarnation) that is still going away; that pod holds
    the job's GPUs, not more of them."""
    world, live = _world(nodes=2)
    for i in range(4):  # the job fills n0 with its first placement
        world.put(world.pods, pod_body(f"j-old-{i}", "n0", 2, job="j", indices=(2 * i, 2 * i + 1), deleting=i == 0))
    world.put(world.pods, pod_body("other", "n1", 8, indices=tuple(range(8))))
    live.refresh([])
    # the repair's record puts other slot names on the same GPUs of n0 while j-old-* are still there
    world.claims["ns/j"] = claim("j", [(f"j-d{i}-p0", "n0", (2 * i, 2 * i + 1)) for i in range(4)])
    view = live.refresh(world.claim_list())
    assert view.warnings == [], view.warnings
    fresh = _fresh(world)
    assert fresh.warnings == []  # type: ignore[attr-defined]
    assert view_differences(view, fresh) == []  # type: ignore[arg-type]
    # a pod of another job on those GPUs is a real oversubscription, and is still reported
    world.put(world.pods, pod_body("intruder", "n0", 2, job="k", indices=(0, 1)))
    view = live.refresh(world.claim_list())
    assert any("intruder" in w for w in view.warnings), view.warnings

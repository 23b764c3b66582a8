"""MIG slices the device plugin hands out, counted per node and profile (core/slices/pools.py): the packing rule
at node granularity, refusals that say why, and the failure policy moving slices by node (slicerepair)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.errors import InvalidRequest, PlacementInfeasible
from paralleljob.core.failure.repair import (
    FailureKind,
    FailurePolicy,
    FailureReport,
    GiveUp,
    GiveUpReason,
    OnUnplaceable,
    Requeue,
)
from paralleljob.core.slices.pools import PoolPlacement, ProfilePool, pack_pool, place_ranks, take
from paralleljob.core.slices.slicerepair import SlicesMoved, SlicesRestarted, decide_pool_repair

ONE = "1g.10gb"


def pool(node: str, offered: int = 56, taken: int = 0, **kw: object) -> ProfilePool:
    return ProfilePool(node, node, ((ONE, offered),), ((ONE, taken),) if taken else (), **kw)  # type: ignore[arg-type]


def test_a_slice_goes_to_the_node_already_sliced_not_a_whole_one() -> None:
    pools = [pool("a"), pool("b", taken=3), pool("c", taken=1)]
    placed = pack_pool(ONE, pools)
    # both b and c are sliced already: the one with the fewest left (best fit) takes it
    assert placed == PoolPlacement("b", ONE, placed.why) and "already sliced" in placed.why
    assert "52 of 56" in placed.why


def test_a_node_in_use_by_whole_gpus_comes_before_an_untouched_one() -> None:
    pools = [pool("a"), pool("b", whole_used=True)]
    assert pack_pool(ONE, pools).node == "b"
    fresh = pack_pool(ONE, [pool("a")])
    assert "breaks a whole node" in fresh.why


def test_a_partly_used_nvlink_domain_comes_before_a_whole_one() -> None:
    pools = [
        ProfilePool("a", "d0", ((ONE, 7),)),
        ProfilePool("b", "d1", ((ONE, 7),)),
        ProfilePool("c", "d1", ((ONE, 7),), whole_used=False, closed="cordoned"),
    ]
    used = [*pools[:2], ProfilePool("x", "d1", ((ONE, 7),), whole_used=True)]
    assert pack_pool(ONE, used).node == "x"
    assert pack_pool(ONE, [used[0], used[1], ProfilePool("x", "d1", (), whole_used=True)]).node == "b"


def test_no_free_slice_is_refused_with_a_reason_per_node() -> None:
    pools = [pool("a", offered=2, taken=2), ProfilePool("b", "b", (("3g.40gb", 2),)), pool("c", closed="cordoned")]
    with pytest.raises(PlacementInfeasible) as caught:
        pack_pool(ONE, pools, "ns/j")
    reasons = caught.value.reasons
    assert reasons[0] == f"no node has a MIG {ONE} slice free"
    assert f"a: all 2 MIG {ONE} slices taken" in reasons
    assert "b: offers no MIG 1g.10gb (it offers 2 x 3g.40gb)" in reasons
    assert "c: cordoned" in reasons


def test_ranks_are_packed_one_after_the_other_and_counted() -> None:
    pools = [pool("a", offered=3), pool("b", offered=3)]
    placed = place_ranks(ONE, 4, pools, "j")
    assert [p.node for p in placed] == ["a", "a", "a", "b"]
    after: tuple[ProfilePool, ...] = tuple(pools)
    for p in placed:
        after = take(after, p)
    assert [x.held(ONE) for x in after] == [3, 1]
    assert take(after, placed[0], release=True)[0].held(ONE) == 2
    with pytest.raises(InvalidRequest):
        ProfilePool("n", "n", ((ONE, -1),))


def test_a_shrunk_offer_under_its_pods_has_none_free() -> None:
    assert pool("a", offered=2, taken=5).free(ONE) == 0


POLICY = FailurePolicy(max_restarts=3)


def test_a_broken_node_moves_its_ranks_to_another_node() -> None:
    pools = [pool("a", taken=2, closed="GPU 3 on a reported unhealthy"), pool("b")]
    held = [PoolPlacement("a", ONE, ""), PoolPlacement("a", ONE, "")]
    decision = decide_pool_repair(pools, held, ONE, POLICY, FailureReport(FailureKind.GPU, (0, 1), 0))
    assert isinstance(decision, SlicesMoved) and decision.ranks == (0, 1)
    assert [p.node for p in decision.placements] == ["b", "b"]


def test_the_policy_restarts_requeues_or_gives_up_as_for_dra_slices() -> None:
    pools = [pool("a", taken=1, closed="down")]
    held = [PoolPlacement("a", ONE, "")]
    worker = decide_pool_repair(pools, held, ONE, POLICY, FailureReport(FailureKind.WORKER, (0,), 0))
    assert isinstance(worker, SlicesRestarted) and worker.ranks == (0,)
    spent = decide_pool_repair(pools, held, ONE, POLICY, FailureReport(FailureKind.GPU, (0,), 3))
    assert isinstance(spent, GiveUp) and spent.reason is GiveUpReason.MAX_RESTARTS
    requeued = decide_pool_repair(pools, held, ONE, POLICY, FailureReport(FailureKind.GPU, (0,), 0))
    assert isinstance(requeued, Requeue) and "a: down" in requeued.reasons
    fail = FailurePolicy(max_restarts=3, on_unplaceable=OnUnplaceable.FAIL)
    no_room = decide_pool_repair(pools, held, ONE, fail, FailureReport(FailureKind.GPU, (0,), 0))
    assert isinstance(no_room, GiveUp) and no_room.reason is GiveUpReason.NO_ROOM


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.booleans(), st.sampled_from(["d0", "d1"])), min_size=1, max_size=5),
    st.lists(st.integers(1, 6), min_size=1, max_size=15),
)
def test_packing_never_overcommits_and_never_breaks_a_node_while_a_used_one_has_room(
    nodes: list[tuple[int, bool, str]], jobs: list[int]
) -> None:
    pools: tuple[ProfilePool, ...] = tuple(
        ProfilePool(f"n{i}", domain, ((ONE, offered),), whole_used=whole)
        for i, (offered, whole, domain) in enumerate(nodes)
    )
    for ranks in jobs:
        before = pools
        try:
            placed = place_ranks(ONE, ranks, pools, "j")
        except PlacementInfeasible:
            assert sum(p.free(ONE) for p in pools) < ranks
            continue
        for placement in placed:
            target = next(p for p in pools if p.node == placement.node)
            if not target.used:
                assert not any(p.used and p.free(ONE) for p in pools), "broke a whole node while a used one had room"
            pools = take(pools, placement)
        assert all(p.held(ONE) <= p.offers(ONE) for p in pools)
        assert sum(p.held(ONE) for p in pools) == sum(p.held(ONE) for p in before) + ranks

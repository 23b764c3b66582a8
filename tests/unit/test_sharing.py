"""The MIG and MPS model and the packing rule (core/slices/mig.py, core/slices/sharing.py): concrete cases."""

from __future__ import annotations

import pytest

from paralleljob.core.errors import InvalidRequest, PlacementInfeasible
from paralleljob.core.slices.mig import A100_40GB, GPU_80GB, MigSlice, free_starts, offers, round_up
from paralleljob.core.slices.sharing import GpuState, MpsShare, NodeGpus, WholeGpus, apply, mps_share_for, pack

P = GPU_80GB.profile


def node(name: str, gpus: int = 8, domain: str | None = None) -> NodeGpus:
    return NodeGpus(name, domain or name, tuple(GpuState() for _ in range(gpus)))


def test_profile_names_follow_the_gpu_operator() -> None:
    assert [p.name for p in GPU_80GB.profiles] == ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert [p.name for p in A100_40GB.profiles] == ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert P("3g.40gb").resource_name == "nvidia.com/mig-3g.40gb"
    with pytest.raises(InvalidRequest, match="no MIG profile"):
        P("5g.50gb")


def test_counters_decide_what_a_gpu_still_offers() -> None:
    # a 4g at 0 takes memory slices 0-3: a second 4g has no placement, a 3g still has start 4
    held = (MigSlice(P("4g.40gb"), 0),)
    assert [p.name for p in offers(GPU_80GB, held)] == ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb"]
    # two 3g slices take all 8 memory slices: nothing is left, the 7th compute slice is stranded
    both = (MigSlice(P("3g.40gb"), 0), MigSlice(P("3g.40gb"), 4))
    assert offers(GPU_80GB, both) == ()
    # seven 1g slices take all compute: the 8th memory slice cannot be used
    ones = tuple(MigSlice(P("1g.10gb"), s) for s in range(7))
    assert offers(GPU_80GB, ones) == () and free_starts(ones, P("1g.10gb")) == ()


def test_a_sliced_gpu_is_not_whole_and_refuses_whole_and_mps() -> None:
    gpu = GpuState().with_(MigSlice(P("1g.10gb"), 6))
    assert not gpu.whole_free
    assert gpu.fit(MpsShare(10, 8.0)) == "sliced by MIG"
    nodes = (NodeGpus("a", "a", (gpu,)),)
    with pytest.raises(PlacementInfeasible, match="0 whole GPU"):
        pack(WholeGpus(1), nodes)


def test_rounding_up_to_the_smallest_covering_profile() -> None:
    assert round_up(GPU_80GB, 0.05) == P("1g.10gb")
    assert round_up(GPU_80GB, 0.32) == P("3g.40gb")  # 2/7 < 0.32 <= 3/7
    assert round_up(GPU_80GB, 0.46) == P("4g.40gb")
    assert round_up(GPU_80GB, 0.10, memory_gb=15) == P("1g.20gb")
    assert round_up(GPU_80GB, 0.81) is None  # only 7g covers it: a whole GPU instead
    assert mps_share_for(460, 80) == MpsShare(46, 36.8)
    with pytest.raises(InvalidRequest):
        mps_share_for(0, 80)


def test_mps_shares_stop_at_the_gpus_compute_and_clients() -> None:
    gpu = GpuState(max_clients=2).with_(MpsShare(60, 10)).with_(MpsShare(30, 10))
    assert gpu.fit(MpsShare(20, 1)) == "2 MPS clients already"
    assert GpuState().with_(MpsShare(60, 10)).fit(MpsShare(50, 1)) == "50% compute asked, 40% left"


def test_packing_fills_a_used_gpu_then_a_used_node_then_breaks_a_node() -> None:
    nodes: tuple[NodeGpus, ...] = (node("a"), node("b"), node("c"))
    first = pack(P("3g.40gb"), nodes)
    nodes = apply(nodes, first)
    second = pack(P("3g.40gb"), nodes)
    assert (second.node, second.gpus) == (first.node, first.gpus)  # onto the GPU already sliced
    nodes = apply(nodes, second)
    third = pack(P("2g.20gb"), nodes)
    assert third.node == first.node and third.gpus != first.gpus and "already in use" in third.why
    big = pack(WholeGpus(8), apply(nodes, third))
    assert big.node != first.node  # the other nodes stayed whole


def test_packing_keeps_whole_nvlink_domains() -> None:
    # b is whole but sits in a domain that is already used; c's domain is whole: b goes first
    nodes = apply((node("a", domain="d1"), node("c", domain="d2"), node("b", domain="d1")),
                  pack(WholeGpus(8), (node("a", domain="d1"),)))  # fmt: skip
    assert pack(MpsShare(10, 8), nodes).node == "b"


def test_every_refusal_says_why_per_node() -> None:
    nodes = (NodeGpus("a", "a", (GpuState(shape=None),)), NodeGpus("b", "b", (GpuState(),), healthy=False))
    with pytest.raises(PlacementInfeasible) as info:
        pack(P("1g.10gb"), nodes)
    assert info.value.reasons == ("no node holds MIG 1g.10gb", "a: 1 GPU(s) no MIG 1g.10gb on this GPU model",
                                  "b: unhealthy")  # fmt: skip


def test_release_gives_the_counters_back() -> None:
    nodes = (node("a", 1),)
    placed = pack(P("7g.80gb"), nodes)
    taken = apply(nodes, placed)
    assert not taken[0].gpus[0].whole_free
    assert apply(taken, placed, release=True) == nodes

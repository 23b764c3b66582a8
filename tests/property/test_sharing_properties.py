"""Properties of GPU sharing (core/slices/mig.py, core/slices/sharing.py) over random sequences of slices, shares
and releases."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.slices.mig import GPU_80GB, MigProfile, offers
from paralleljob.core.slices.sharing import GpuState, MpsShare, NodeGpus, Placement, Request, WholeGpus, apply, pack
from paralleljob.sim.run.sharing import check_gpu

requests = st.one_of(
    st.sampled_from(GPU_80GB.profiles),
    st.builds(MpsShare, st.integers(1, 100), st.floats(0, 40)),
    st.builds(WholeGpus, st.integers(1, 8)),
)
steps = st.lists(st.tuples(requests, st.integers(0, 10**6)), min_size=1, max_size=40)
shapes = st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from(["d0", "d1", "d2"])), min_size=1, max_size=5)


def cluster(shape: list[tuple[int, str]]) -> tuple[NodeGpus, ...]:
    return tuple(NodeGpus(f"n{i}", domain, tuple(GpuState() for _ in range(g))) for i, (g, domain) in enumerate(shape))


def fits(request: Request, node: NodeGpus) -> bool:
    try:
        pack(request, [node])
    except PlacementInfeasible:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(shapes, steps)
def test_counters_hold_and_packing_keeps_whole_nodes(shape: list[tuple[int, str]], script: list) -> None:
    nodes = cluster(shape)
    held: list[Placement] = []
    for request, pick in script:
        if held and pick % 3 == 0:  # give one back
            nodes = apply(nodes, held.pop(pick % len(held)), release=True)
            continue
        try:
            placed = pack(request, nodes)
        except PlacementInfeasible as refusal:
            assert refusal.reasons and all(refusal.reasons)
            assert not any(fits(request, n) for n in nodes)  # a refusal is never wrong
            continue
        target = next(n for n in nodes if n.name == placed.node)
        if not isinstance(request, WholeGpus) and not target.used:
            # a slice or share breaks a whole node only when no partly used node fits it
            assert not any(n.used and fits(request, n) for n in nodes)
            used_domains = {n.domain for n in nodes if n.used}
            if target.domain not in used_domains:
                assert not any(n.domain in used_domains and fits(request, n) for n in nodes)
        if isinstance(request, WholeGpus):
            assert all(target.gpus[i].whole_free for i in placed.gpus)  # never a sliced or shared GPU
        nodes = apply(nodes, placed)
        held.append(placed)
        for node in nodes:
            for gpu in node.gpus:
                check_gpu(gpu)  # memory slices once, compute <= 7 slices, shares <= 100% and the memory
                assert not (gpu.whole_free and gpu.used)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(GPU_80GB.profiles), st.booleans()), max_size=20))
def test_a_gpu_offers_a_profile_exactly_when_it_can_take_it(script: list[tuple[MigProfile, bool]]) -> None:
    gpu = GpuState()
    for profile, _ in script:
        grant = gpu.fit(profile)
        if isinstance(grant, str):
            continue
        gpu = gpu.with_(grant)
        assert not gpu.whole_free  # a sliced GPU is never offered as whole
    offered = set(offers(GPU_80GB, gpu.slices))
    for profile in GPU_80GB.profiles:
        assert (profile in offered) == (not isinstance(gpu.fit(profile), str))

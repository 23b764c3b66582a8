"""Properties of the operator's MPS shares in the core (``core/slices/sharing.py``: a share's pool) over random
sequences of share jobs of several namespaces and sizes, whole-GPU jobs and releases: a GPU is never over-filled
(compute, memory, clients), its shares are all of one namespace and one size (one claim, one config), a shared
GPU is never given whole, and packing never opens a fresh GPU while a GPU of the job's pool has room."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.slices.sharing import (
    MPS_MAX_CLIENTS,
    GpuState,
    MpsShare,
    NodeGpus,
    Placement,
    WholeGpus,
    apply,
    pack,
)

MEMORY = 80.0


def share(namespace: str, percent: int) -> MpsShare:
    """As the operator sizes a share (``plan/slices/mpsbook.share_of``)."""
    return MpsShare(percent, MEMORY * percent / 100, f"{namespace}/{percent}")


jobs = st.one_of(
    st.builds(share, st.sampled_from(["ns-a", "ns-b"]), st.sampled_from([1, 10, 25, 33, 50, 60, 100])),
    st.builds(WholeGpus, st.integers(1, 4)),
)
steps = st.lists(st.tuples(jobs, st.integers(1, 6), st.integers(0, 10**6)), min_size=1, max_size=30)
shapes = st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=4)


def check(nodes: tuple[NodeGpus, ...]) -> None:
    for node in nodes:
        for gpu in node.gpus:
            if not gpu.shares:
                continue
            assert not gpu.whole and not gpu.slices
            assert len({s.pool for s in gpu.shares}) == 1, "one namespace and one size on a GPU"
            percent = gpu.shares[0].compute_pct
            assert sum(s.compute_pct for s in gpu.shares) <= 100
            assert sum(s.memory_gb for s in gpu.shares) <= MEMORY + 1e-6
            assert len(gpu.shares) <= min(100 // percent, MPS_MAX_CLIENTS)


@settings(max_examples=200, deadline=None)
@given(shapes, steps)
def test_share_jobs_never_overfill_or_mix_on_a_gpu(shape: list[int], script: list) -> None:
    nodes = tuple(NodeGpus(f"n{i}", f"n{i}", tuple(GpuState() for _ in range(g))) for i, g in enumerate(shape))
    held: list[list[Placement]] = []
    for request, ranks, pick in script:
        if held and pick % 4 == 0:  # a job ends: all of its ranks go
            for placement in held.pop(pick % len(held)):
                nodes = apply(nodes, placement, release=True)
            check(nodes)
            continue
        placed: list[Placement] = []
        try:
            for _ in range(1 if isinstance(request, WholeGpus) else ranks):
                before = nodes
                placement = pack(request, nodes)
                gpu = next(n for n in nodes if n.name == placement.node).gpus[placement.gpus[0]]
                if isinstance(request, WholeGpus):
                    assert all(
                        next(n for n in nodes if n.name == placement.node).gpus[i].whole_free for i in placement.gpus
                    )
                elif not gpu.shares:  # a fresh GPU only when no GPU of the pool has room
                    assert not any(
                        g.shares and g.shares[0].pool == request.pool and isinstance(g.fit(request), type(request))
                        for n in before
                        if n.healthy
                        for g in n.gpus
                    )
                nodes = apply(nodes, placement)
                placed.append(placement)
        except PlacementInfeasible as refusal:
            assert refusal.reasons
            for placement in placed:  # a job is placed whole or not at all
                nodes = apply(nodes, placement, release=True)
            placed = []
        check(nodes)
        if placed:
            held.append(placed)


def test_four_quarter_shares_fill_a_gpu_and_another_namespace_or_size_takes_another() -> None:
    nodes: tuple[NodeGpus, ...] = (NodeGpus("n0", "n0", (GpuState(), GpuState(), GpuState())),)
    for _ in range(4):
        placement = pack(share("ns-a", 25), nodes)
        assert placement.gpus == (0,)
        nodes = apply(nodes, placement)
    assert pack(share("ns-a", 25), nodes).gpus == (1,), "full: the fifth goes to another GPU"
    nodes = tuple(apply(nodes, pack(share("ns-a", 20), nodes)))
    assert nodes[0].gpus[1].shares[0].compute_pct == 20
    assert pack(share("ns-b", 20), nodes).gpus == (2,), "another namespace never joins that GPU"
    gpu = nodes[0].gpus[0]
    assert gpu.fit(share("ns-b", 25)) == "shared by MPS clients of another pool (ns-a/25)"

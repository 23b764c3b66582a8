"""The failure policy of a MIG-slice job as one decision (core/slices/slicerepair.py): restarts, moves under
the packing rule, requeue or give-up."""

from __future__ import annotations

from dataclasses import replace

from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import (
    FailureKind,
    FailurePolicy,
    FailureReport,
    GiveUp,
    GiveUpReason,
    OnUnplaceable,
    Requeue,
)
from paralleljob.core.slices.mig import A100_40GB, GPU_80GB, MigSlice
from paralleljob.core.slices.sharing import GpuState, NodeGpus, Placement, apply, pack
from paralleljob.core.slices.slicerepair import SlicesMoved, SlicesRestarted, decide_slice_repair

P = GPU_80GB.profile
ONE = P("1g.10gb")


def two_slices_on_gpu0() -> tuple[list[NodeGpus], list[Placement]]:
    """Two ranks of 1g.10gb packed onto GPU 0 of n0; n1 empty."""
    nodes: list[NodeGpus] = [NodeGpus(n, n, tuple(GpuState() for _ in range(2))) for n in ("n0", "n1")]
    held = []
    for _ in range(2):
        placement = pack(ONE, nodes)
        nodes = list(apply(nodes, placement))
        held.append(placement)
    assert [(p.node, p.gpus) for p in held] == [("n0", (0,)), ("n0", (0,))]
    return nodes, held


def broken(nodes: list[NodeGpus], node: str, gpu: int) -> list[NodeGpus]:
    out = []
    for n in nodes:
        if n.name == node:
            gpus = list(n.gpus)
            gpus[gpu] = replace(gpus[gpu], healthy=False)
            n = replace(n, gpus=tuple(gpus))
        out.append(n)
    return out


def test_a_broken_gpu_moves_the_slices_on_it_and_packs_them_together_again() -> None:
    nodes, held = two_slices_on_gpu0()
    nodes = broken(nodes, "n0", 0)
    report = FailureReport(FailureKind.GPU, (0, 1), restarts=0)
    decision = decide_slice_repair(nodes, held, ONE, FailurePolicy(), report)
    assert isinstance(decision, SlicesMoved)
    assert decision.ranks == (0, 1)
    # the healthy GPU of the node already in use, both on it (packed, not spread onto n1)
    assert [(p.node, p.gpus) for p in decision.placements] == [("n0", (1,)), ("n0", (1,))]
    assert all(isinstance(p.grant, MigSlice) for p in decision.placements)
    assert len({p.grant.start for p in decision.placements if isinstance(p.grant, MigSlice)}) == 2


def test_minimal_moves_only_the_broken_rank_and_full_moves_all() -> None:
    nodes, held = two_slices_on_gpu0()
    report = FailureReport(FailureKind.GPU, (1,), restarts=0)
    minimal = decide_slice_repair(nodes, held, ONE, FailurePolicy(), report)
    assert isinstance(minimal, SlicesMoved) and minimal.ranks == (1,)
    full = decide_slice_repair(nodes, held, ONE, FailurePolicy(strategy=RecoveryStrategy.FULL), report)
    assert isinstance(full, SlicesMoved) and full.ranks == (0, 1)


def test_a_crashed_worker_restarts_on_its_own_slice() -> None:
    nodes, held = two_slices_on_gpu0()
    decision = decide_slice_repair(nodes, held, ONE, FailurePolicy(), FailureReport(FailureKind.WORKER, (1,), 0))
    assert decision == SlicesRestarted((1,), ("1 rank(s) restarted on the same MIG slices",))


def test_max_restarts_ends_the_job_and_a_drain_is_not_counted() -> None:
    nodes, held = two_slices_on_gpu0()
    policy = FailurePolicy(max_restarts=1)
    decision = decide_slice_repair(nodes, held, ONE, policy, FailureReport(FailureKind.GPU, (0,), restarts=1))
    assert isinstance(decision, GiveUp) and decision.reason is GiveUpReason.MAX_RESTARTS
    drained = decide_slice_repair(nodes, held, ONE, policy, FailureReport(FailureKind.DRAINED, (0,), restarts=1))
    assert isinstance(drained, SlicesMoved)


def test_no_room_requeues_or_fails_as_on_unplaceable_says() -> None:
    nodes, held = two_slices_on_gpu0()
    for name in ("n0", "n1"):
        for gpu in (0, 1):
            nodes = broken(nodes, name, gpu)
    report = FailureReport(FailureKind.GPU, (0,), restarts=0)
    requeued = decide_slice_repair(nodes, held, ONE, FailurePolicy(), report)
    assert isinstance(requeued, Requeue) and any("unhealthy" in r for r in requeued.reasons)
    failed = decide_slice_repair(nodes, held, ONE, FailurePolicy(on_unplaceable=OnUnplaceable.FAIL), report)
    assert isinstance(failed, GiveUp) and failed.reason is GiveUpReason.NO_ROOM


def test_a_rank_whose_node_is_gone_and_a_profile_nobody_offers() -> None:
    nodes, held = two_slices_on_gpu0()
    gone: list[Placement | None] = [held[0], None]
    moved = decide_slice_repair(nodes, gone, ONE, FailurePolicy(), FailureReport(FailureKind.NODE, (1,), 0))
    assert isinstance(moved, SlicesMoved) and moved.placements[0].node == "n0"
    lost = decide_slice_repair(nodes, gone, None, FailurePolicy(), FailureReport(FailureKind.NODE, (1,), 0))
    assert isinstance(lost, Requeue) and "no node offers" in lost.reasons[0]


def test_a_profile_is_matched_by_name_on_another_gpu_model() -> None:
    # 1g.10gb is one memory slice on an 80 GB GPU and two on an A100-40GB: asked by name, each GPU places its own
    gpu = GpuState(memory_gb=40, shape=A100_40GB)
    grant = gpu.fit(ONE)
    assert isinstance(grant, MigSlice) and grant.profile == A100_40GB.profile("1g.10gb")
    assert grant.profile.memory_slices == 2

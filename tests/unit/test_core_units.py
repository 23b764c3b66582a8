"""Unit tests of the core's pieces: topology, cost models, lifecycle, checkpoints, refusals."""

from __future__ import annotations

import math

import pytest

from paralleljob.core import (
    Allocation,
    ClusterState,
    Event,
    GPUHealth,
    GPUState,
    IllegalTransition,
    JobSpec,
    Level,
    MegatronCostModel,
    ModelShape,
    NodeSpec,
    Phase,
    PlacementInfeasible,
    Placer,
    RecoveryStrategy,
    Topology,
    cost_model,
    recover,
    transition,
    young_daly_interval_seconds,
)
from paralleljob.core.failure.checkpoint import job_mtbf_seconds
from paralleljob.core.lifecycle import TRANSITIONS


def tree(num_nodes: int = 8) -> Topology:
    return Topology.uniform(num_nodes, 8, levels=[("rack", 2, 200.0), ("spine", 4, 100.0)])


# ---- topology -------------------------------------------------------------------------------------
def test_tree_levels_and_bandwidths():
    topo = tree()
    assert [level.name for level in topo.levels] == ["node", "rack", "spine", "cluster"]
    assert topo.common_level(0, 0) == 0
    assert topo.common_level(0, 1) == 1
    assert topo.common_level(0, 2) == 2
    assert topo.common_level(0, 4) == 3
    assert topo.bandwidth_between(0, 1) == 600.0
    assert topo.bandwidth_between(0, 8) == 200.0
    assert topo.bandwidth_between(0, 16) == 100.0
    assert topo.bandwidth_between(0, 32) == 50.0


def test_heterogeneous_nodes_from_specs():
    levels = [Level("node", 900.0), Level("clique", 900.0), Level("zone", 25.0)]
    nodes = [
        NodeSpec("gb200-a", 4, 186.0, ("clique-1", "z")),
        NodeSpec("gb200-b", 4, 186.0, ("clique-1", "z")),
        NodeSpec("a100", 8, 40.0, ("clique-2", "z")),
    ]
    topo = Topology.from_nodes(nodes, levels)
    assert topo.num_gpus == 16
    assert list(topo.node_gpus(2)) == list(range(8, 16))
    assert topo.bandwidth_between(0, 4) == 900.0  # across nodes inside one NVLink clique
    assert topo.bandwidth_between(0, 8) == 25.0


@pytest.mark.parametrize(
    ("nodes", "levels", "message"),
    [
        ([], [Level("node", 1.0)], "at least one node"),
        (
            [NodeSpec("a", 8, domains=("c",)), NodeSpec("a", 8, domains=("c",))],
            [Level("node", 1.0), Level("c", 1.0)],
            "unique",
        ),
        ([NodeSpec("a", 8, domains=("r1",))], [Level("node", 1.0)], "names 1 domains"),
        (
            [NodeSpec("a", 8, domains=("r1", "s1", "c")), NodeSpec("b", 8, domains=("r1", "s2", "c"))],
            [Level("node", 600.0), Level("rack", 200.0), Level("spine", 100.0), Level("c", 50.0)],
            "spans two spines",
        ),
        (
            [NodeSpec("a", 8, domains=("c",))],
            [Level("node", 100.0), Level("cluster", 200.0)],
            "faster than the level below",
        ),
        (
            [NodeSpec("a", 8, domains=("x",)), NodeSpec("b", 8, domains=("y",))],
            [Level("node", 1.0), Level("t", 1.0)],
            "single domain",
        ),
        ([NodeSpec("a", 8)], [Level("node", 0.0)], "positive bandwidth"),
    ],
)
def test_invalid_topologies_are_refused_with_a_reason(nodes, levels, message):
    with pytest.raises(ValueError, match=message):
        Topology.from_nodes(nodes, levels)


# ---- cost models ------------------------------------------------------------------------------------
def test_megatron_cost_by_hand():
    job = JobSpec(
        "m",
        2,
        2,
        2,
        10.0,
        ModelShape(
            hidden_dim=1024,
            seq_len=1024,
            micro_batch_size=2,
            num_params_billions=1.0,
            num_layers=8,
            global_batch_size=32,
        ),
    )
    model = MegatronCostModel()
    act = 2 * 1024 * 1024 * 2  # micro-batch x seq x hidden x bytes
    micro_batches = 32 // (2 * 2)
    per_allreduce = 2 * (2 - 1) / 2 * act / 600e9 * 1e3
    assert model.tp_ms(job, 600.0) == pytest.approx(micro_batches * (8 // 2) * 4 * per_allreduce)
    send = 2 * act / 50e9 * 1e3
    assert model.pp_ms(job, [50.0]) == pytest.approx(send + (micro_batches - 1) * send)
    shard = 1e9 * 2 / (2 * 2)
    assert model.dp_ms(job, 50.0) == pytest.approx(2 * 1 / 2 * shard / 50e9 * 1e3)
    assert model.pp_ms(job, []) == 0.0


def test_megatron_defaults_derive_layers_and_micro_batches():
    job = JobSpec("m", 1, 4, 1, 1.0, ModelShape(hidden_dim=8192, num_params_billions=70.0))
    assert job.model.layers() == round(70e9 / (12 * 8192**2))
    assert MegatronCostModel().micro_batches(job) == 16


def test_infinite_bandwidth_costs_nothing():
    job = JobSpec("j", 4, 2, 2, 1.0)
    seed = cost_model("seed")
    assert seed.tp_ms(job, math.inf) == 0.0
    assert seed.dp_ms(job, math.inf) == 0.0


# ---- lifecycle -------------------------------------------------------------------------------------
def test_happy_path_and_recovery_follow_the_table():
    phase = Phase.PENDING
    for event in (Event.ACCEPTED, Event.ADMITTED, Event.BOUND, Event.HARDWARE_FAILED, Event.REPAIRED):
        phase = transition(phase, event)
    assert phase is Phase.RUNNING
    assert transition(Phase.RUNNING, Event.PREEMPTED) is Phase.PREEMPTED
    assert transition(Phase.PREEMPTED, Event.REQUEUED) is Phase.QUEUED
    assert transition(Phase.RUNNING, Event.COMPLETED) is Phase.SUCCEEDED


def test_terminal_phases_have_no_way_out_and_illegal_events_raise():
    for phase in (Phase.SUCCEEDED, Phase.FAILED):
        assert phase.terminal and [event for (source, event) in TRANSITIONS if source is phase] == []
    with pytest.raises(IllegalTransition, match="'Bound' is not allowed in phase 'Queued'"):
        transition(Phase.QUEUED, Event.BOUND)
    # every non-terminal phase can eventually reach a terminal one
    reach = {p for p in Phase if p.terminal}
    changed = True
    while changed:
        changed = False
        for (source, _), target in TRANSITIONS.items():
            if target in reach and source not in reach:
                reach.add(source)
                changed = True
    assert reach == set(Phase)


# ---- checkpoints -----------------------------------------------------------------------------------
def test_young_daly():
    assert young_daly_interval_seconds(60.0, 86_400.0) == pytest.approx(math.sqrt(2 * 60 * 86_400))
    # 128 nodes at Llama 3's 3.79 failures per 1000 node-days
    assert job_mtbf_seconds(128, 3.79) == pytest.approx(86_400 / (3.79 / 1000 * 128))
    with pytest.raises(ValueError):
        young_daly_interval_seconds(0.0, 1.0)


# ---- refusals and placement on trees ------------------------------------------------------------------
def test_refusals_say_why_with_numbers():
    state = ClusterState(Topology.uniform(2, 8))
    placer = Placer(state)
    state.allocate(Allocation("x", ((0, 1, 2, 3, 4),), 1.0))
    with pytest.raises(PlacementInfeasible) as info:
        placer.place(JobSpec("j", 4, 1, 3, 1.0), cost_model("seed"))
    assert not info.value.permanent
    assert "needs 3 TP groups of 4 GPUs" in info.value.reasons[0]
    assert "only 2 such groups are free" in info.value.reasons[0]
    assert "best node has 8 free GPUs" in info.value.reasons[1]
    with pytest.raises(PlacementInfeasible) as info:
        placer.place(JobSpec("j", 16, 1, 1, 1.0), cost_model("seed"))
    assert info.value.permanent and "largest node has 8" in info.value.reasons[0]


def test_refusal_counts_agree_in_number_and_omit_a_zero_memory_request():
    # Issue 21: "only 1 such groups", and "0 GB" read as a requirement of zero GB.
    state = ClusterState(Topology.uniform(2, 8))
    placer = Placer(state)
    state.allocate(Allocation("x", ((0, 1, 2, 3, 4, 5, 6, 7),), 0.0))
    with pytest.raises(PlacementInfeasible) as info:
        placer.place(JobSpec("j", 8, 1, 2, 0.0), cost_model("seed"))
    assert "only 1 such group is free now" in info.value.reasons[0]
    assert "GB" not in info.value.reasons[0]
    state.allocate(Allocation("y", ((8, 9, 10, 11, 12, 13, 14, 15),), 0.0))
    with pytest.raises(PlacementInfeasible) as info:
        placer.place(JobSpec("j", 8, 1, 1, 0.0), cost_model("seed"))
    assert "no such group is free now" in info.value.reasons[0]
    assert JobSpec("j", 4, 2, 2, 0.0).describe() == "TP4xPP2xDP2 (16 GPUs)"
    assert JobSpec("j", 4, 2, 2, 40.0).describe() == "TP4xPP2xDP2 (16 GPUs, 40 GB each)"
    assert JobSpec("j", 1, 1, 1, 0.0).describe() == "TP1xPP1xDP1 (1 GPU)"  # seen walking the docs: "(1 GPUs)"


def test_cordoned_and_unhealthy_hardware_gets_no_new_work():
    state = ClusterState(Topology.uniform(2, 8))
    placer = Placer(state)
    state.set_node_schedulable(0, False)
    state.set_health(8, GPUHealth.OFFLINE)
    assert state.gpu_state(8) is GPUState.OFFLINE
    placement = placer.place(JobSpec("j", 1, 1, 7, 1.0), cost_model("seed"))
    assert sorted(placement.gpus) == list(range(9, 16))
    with pytest.raises(PlacementInfeasible):
        placer.place(JobSpec("k", 1, 1, 8, 1.0), cost_model("seed"))


def test_dp_groups_stay_in_a_rack_when_a_node_cannot_hold_them():
    state = ClusterState(tree(8))
    placement = Placer(state).place(JobSpec("j", 8, 1, 2, 1.0), cost_model("seed"))
    nodes = placement.group_nodes
    assert state.topology.common_level(nodes[0], nodes[1]) == 1  # same rack, not across the spine
    assert placement.proven_optimal


def test_minimal_recovery_prefers_a_spare_in_the_same_rack():
    state = ClusterState(Topology.uniform(8, 8, levels=[("rack", 4, 200.0), ("spine", 8, 100.0)]))
    placer = Placer(state)
    job = JobSpec("j", 8, 2, 1, 1.0)
    placement = placer.place(job, cost_model("seed"))
    state.allocate(Allocation("j", placement.groups, 1.0))
    rack_of = state.topology.domain_of[1]
    broken_node, kept_node = placement.group_nodes
    assert rack_of[broken_node] == rack_of[kept_node]
    state.set_health(placement.groups[0][0], GPUHealth.OFFLINE)
    outcome = recover(state, placer, job, cost_model("seed"), RecoveryStrategy.MINIMAL)
    assert outcome.action == "rescheduled" and outcome.new is not None
    new_node, still = outcome.new.group_nodes
    assert still == kept_node and new_node not in (broken_node, kept_node)
    assert rack_of[new_node] == rack_of[kept_node]
    assert outcome.cost_after is not None
    assert outcome.cost_after.total_ms == pytest.approx(outcome.cost_before.total_ms)
    assert outcome.moved_gpus == 8
    assert any("->" in r for r in outcome.reasons)


@pytest.mark.parametrize("strategy", [RecoveryStrategy.MINIMAL, RecoveryStrategy.FULL])
def test_a_job_with_every_group_broken_is_placed_as_a_new_job_would_be_not_kept_on_the_damaged_node(
    strategy: RecoveryStrategy,
) -> None:
    # Issue 43's seed-2 tie: a TP2 job on a 4-GPU node loses a GPU; after the release that node and a 2-GPU
    # node both have exactly 2 free GPUs at the same cost. Keeping the job on the damaged node (its old
    # node) differed from where a new job, and best-fit's re-placement, go, and that one tie moved a whole
    # strict-FIFO run by 28%. Nothing of the job is kept either way: its only group restarts.
    def cluster() -> tuple[ClusterState, Allocation]:
        nodes = [NodeSpec("four", 4, domains=("c",)), NodeSpec("two", 2, domains=("c",))]
        state = ClusterState(Topology.from_nodes(nodes, [Level("node", 600.0), Level("cluster", 50.0)]))
        state.allocate(Allocation("other", ((2,),), 1.0))
        old = Allocation("j", ((0, 1),), 1.0)
        state.allocate(old)
        state.set_health(0, GPUHealth.OFFLINE)
        return state, old

    job = JobSpec("j", 2, 1, 1, 1.0)
    state, _ = cluster()
    outcome = recover(state, Placer(state), job, cost_model("seed"), strategy)
    twin, _ = cluster()
    twin.release("j")
    fresh = Placer(twin).place(job, cost_model("seed"))
    assert outcome.new is not None
    assert outcome.new.groups == fresh.groups == ((4, 5),)  # the 2-GPU node, first in the packing order
    assert any("placed afresh" in r for r in outcome.reasons)


def test_minimal_recovery_with_no_spare_in_the_rack_goes_one_level_up():
    state = ClusterState(tree(8))  # racks of two nodes
    placer = Placer(state)
    job = JobSpec("j", 8, 2, 1, 1.0)
    placement = placer.place(job, cost_model("seed"))
    state.allocate(Allocation("j", placement.groups, 1.0))
    state.set_health(placement.groups[0][0], GPUHealth.OFFLINE)
    outcome = recover(state, placer, job, cost_model("seed"), RecoveryStrategy.MINIMAL)
    assert outcome.new is not None
    new_node, kept = outcome.new.group_nodes
    assert state.topology.common_level(new_node, kept) == 2  # same spine, not across the cluster


def test_a_minimal_repair_keeps_the_groups_it_moves_together_when_that_costs_no_more() -> None:
    # Issue 43's seed-3 case: a DP16 job of single GPUs on two 8-GPU nodes loses one node's 8 ranks. The cost
    # model prices the DP ring by its slowest link, so one spare GPU on one node and seven on another cost the
    # same as eight on one node; NCCL's ring over one node's one NIC is 11x slower (core/timing/stepcomm.py). The 8
    # moved ranks go to one node: spreading them one by one, tightest node first, split them 1 + 7.
    nodes = [NodeSpec(f"n{i}", 8, domains=("rack",)) for i in range(5)]
    state = ClusterState(Topology.from_nodes(nodes, [Level("node", 600.0), Level("rack", 50.0)]))
    job = JobSpec("j", 1, 1, 16, 1.0)
    old = Allocation("j", tuple((g,) for g in range(16)), 1.0)  # n0 and n1
    state.allocate(old)
    state.allocate(Allocation("seven", tuple((g,) for g in range(16, 23)), 1.0))  # n2: one GPU free
    state.allocate(Allocation("one", ((24,),), 1.0))  # n3: seven free; n4 whole and free
    for gpu in range(8):
        state.set_health(gpu, GPUHealth.OFFLINE)
    outcome = recover(state, Placer(state), job, cost_model("seed"), RecoveryStrategy.MINIMAL)
    assert outcome.new is not None and outcome.new.groups[8:] == old.groups[8:]  # the healthy ranks stay
    moved_to = {state.topology.gpu_node[group[0]] for group in outcome.new.groups[:8]}
    assert len(moved_to) == 1, moved_to

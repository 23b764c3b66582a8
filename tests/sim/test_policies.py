"""Placement policies: ours never splits a TP group across nodes; first-fit does on a fragmented cluster."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.baselines import BestFitDomainPlacer, FirstFitPlacer, tp_groups_across_nodes
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.clusters import node_list_cluster
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.run.policies import FifoQueue, WaitingJob
from paralleljob.sim.workload.trace import TraceJob

SEED = cost_model("seed")


def fragmented_trace() -> list[TraceJob]:
    # Three-GPU jobs, every other one short: when the short ones end, the free GPUs are holes of three that
    # straddle node boundaries in id order. First-fit cuts TP4 groups out of them; ours and best-fit keep
    # each group inside one node.
    rng = random.Random(1)
    trace = [TraceJob(f"frag{i}", float(i), 10_000.0 if i % 2 else 50.0, 3, shape=(1, 1, 3)) for i in range(8)]
    trace += [TraceJob(f"tp{i}", 100.0 + i, rng.uniform(50, 500), 8, shape=(4, 1, 2)) for i in range(6)]
    return trace


@pytest.mark.parametrize("policy", ["ours", "best-fit", "first-fit", "volcano"])
def test_tp_groups_across_nodes(policy: str) -> None:
    simulation = Simulation(Topology.uniform(6), fragmented_trace(), SimConfig(policy=policy, check_invariants=True))
    metrics = simulation.run().metrics
    assert metrics["jobs"]["completed"] == 14
    if policy == "first-fit":
        assert metrics["tp_groups_across_nodes"] > 0
        assert metrics["slowdown_multi_gpu_jobs"]["max"] > 1.0
    else:
        assert metrics["tp_groups_across_nodes"] == 0


def test_ours_never_splits_on_the_heterogeneous_alibaba_nodes(traces: Path) -> None:
    topology = node_list_cluster(traces / "alibaba2023_openb_gpu_nodes.csv", sample=30, seed=2)
    rng = random.Random(4)
    trace = [
        TraceJob(f"j{i}", i * 60.0, rng.uniform(600, 20_000), rng.choice([1, 2, 4, 8, 16])) for i in range(300)
    ]
    split = {}
    for policy in ("ours", "first-fit"):
        metrics = Simulation(topology, trace, SimConfig(policy=policy, seed=3)).run().metrics
        split[policy] = metrics["tp_groups_across_nodes"]
    assert split["ours"] == 0
    assert split["first-fit"] > 0


def test_first_fit_takes_gpus_in_id_order_and_may_split() -> None:
    state = ClusterState(Topology.uniform(2))
    state.allocate(Allocation("x", ((0, 1, 2, 3, 4, 5),), 0.0))
    placement = FirstFitPlacer(state).place(JobSpec("j", 4, 1, 1, 0.0), SEED)
    assert placement.groups == ((6, 7, 8, 9),)
    assert tp_groups_across_nodes(state, placement.groups) == 1
    assert placement.cost.tp_ms > 0 and not placement.proven_optimal
    with pytest.raises(PlacementInfeasible) as info:
        FirstFitPlacer(state).place(JobSpec("big", 1, 1, 11, 0.0), SEED)
    assert not info.value.permanent
    with pytest.raises(PlacementInfeasible) as info:
        FirstFitPlacer(state).place(JobSpec("huge", 1, 1, 17, 0.0), SEED)
    assert info.value.permanent


def test_best_fit_picks_the_smallest_domain_and_packs_groups() -> None:
    topology = Topology.uniform(8, levels=[("rack", 4, 100.0)])
    state = ClusterState(topology)
    state.allocate(Allocation("x", tuple((g,) for g in range(0, 30)), 0.0))  # rack 0 nearly full: 2 GPUs left
    placer = BestFitDomainPlacer(state)
    small = placer.place(JobSpec("small", 2, 1, 1, 0.0), SEED)
    assert small.group_nodes == (3,)  # the tightest node: the 2 GPUs left in rack 0
    job = JobSpec("wide", 4, 2, 2, 0.0)  # 16 GPUs: does not fit a node, fits rack 1
    placement = placer.place(job, SEED)
    assert {topology.domain_of[1][n] for n in placement.group_nodes} == {1}
    assert sorted(placement.group_nodes) == [4, 4, 5, 5]
    assert tp_groups_across_nodes(state, placement.groups) == 0
    with pytest.raises(PlacementInfeasible) as info:
        placer.place(JobSpec("too-wide", 16, 1, 1, 0.0), SEED)
    assert info.value.permanent


def test_fifo_keeps_arrival_order_across_requeues() -> None:
    queue = FifoQueue()
    for order, name in enumerate("abc"):
        queue.add(WaitingJob(name, order, 0.0, 1, "t", 0), 0.0)
    queue.remove("a")
    queue.add(WaitingJob("a", 0, 0.0, 1, "t", 0), 5.0)  # back from a failed recovery: first again
    assert [j.job_id for j in queue.candidates(5.0)] == ["a", "b", "c"]
    queue.remove("b")
    assert [j.job_id for j in queue.candidates(5.0)] == ["a", "c"] and len(queue) == 2


def test_volcano_takes_the_lowest_tier_then_the_fullest_node_pod_by_pod() -> None:
    from paralleljob.sim.run.volcano import VolcanoTierPlacer

    # Two racks of two nodes. Rack 0 has node 0 with 6 GPUs taken; rack 1 is empty. A TP2 x DP2 job fits
    # rack 0 (the most utilised rack that holds it); its pods binpack: node 0's last two GPUs first.
    state = ClusterState(Topology.uniform(4, levels=[("rack", 2, 100.0)]))
    state.allocate(Allocation("busy", ((0, 1, 2, 3, 4, 5),), 0.0))
    placement = VolcanoTierPlacer(state).place(JobSpec("j", 2, 1, 2, 0.0), SEED)
    assert placement.groups == ((6, 7), (8, 9))
    assert tp_groups_across_nodes(state, placement.groups) == 0
    with pytest.raises(PlacementInfeasible):
        VolcanoTierPlacer(state).place(JobSpec("big", 8, 1, 4, 0.0), SEED)

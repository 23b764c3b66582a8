"""The NVLink placer (core/nvl72/nvlink) on clique topologies: the brute-force and MILP optimum on random small
instances, the tiers of a mixed HGX + NVL72 cluster, warm spares, repairs inside the rack, and refusals that
say what is missing."""

from __future__ import annotations

import random

import pytest

from paralleljob.core import (
    Allocation,
    ClusterState,
    GPUHealth,
    InvalidRequest,
    JobSpec,
    Level,
    ModelShape,
    NodeSpec,
    PlacementInfeasible,
    Placer,
    Topology,
    cost_model,
)
from paralleljob.core.nvl72.cliques import clique_index, nvl72_topology, nvlink_never_fits
from paralleljob.core.nvl72.nvlink import NVLinkPlacer, make_placer
from paralleljob.core.nvl72.traypods import tray_pods
from paralleljob.core.placing.eligibility import FilteredPlacer, NodeFilter
from paralleljob.core.rankorder import RankOrder, node_rank

from .cliquebrute import brute_force_cliques, whole_free_trays


def clique_topology(rng: random.Random) -> Topology:
    cliques = rng.randint(1, 3)
    g = rng.choice([2, 4])
    specs = []
    for c in range(cliques):
        for t in range(rng.randint(2, 4)):
            specs.append(NodeSpec(f"c{c}-t{t}", g, 80.0, (f"clique-{c}", f"spine-{c // 2}", "cluster")))
    levels = [Level("node", 100.0), Level("clique", 100.0), Level("spine", 20.0), Level("cluster", 10.0)]
    return Topology.from_nodes(specs, levels, nvlink_level=1)


def random_instance(rng: random.Random):
    topo = clique_topology(rng)
    state = ClusterState(topo)
    g = topo.node_gpu_count[0]
    for i, gpu in enumerate(rng.sample(range(topo.num_gpus), rng.randint(0, topo.num_gpus // 3))):
        if rng.random() < 0.3:
            state.set_health(gpu, GPUHealth.OFFLINE)
        else:
            state.allocate(Allocation(f"other-{i}", ((gpu,),), 10.0))
    if rng.random() < 0.2:
        state.set_node_schedulable(rng.randrange(topo.num_nodes), False)
    while True:
        tp = rng.choice([t for t in (g // 2, g, 2 * g, 2 * g) if t >= 1])
        pp, dp = rng.randint(1, 3), rng.randint(1, 3)
        if pp * dp <= 5 and tp * pp * dp > g:  # larger than a tray: whole trays of cliques
            break
    shape = ModelShape(
        hidden_dim=rng.choice([1024, 4096, 8192]),
        seq_len=rng.choice([512, 2048]),
        num_params_billions=rng.choice([0.1, 7.0, 70.0]),
    )
    return state, JobSpec("job", tp, pp, dp, 40.0, shape), cost_model(rng.choice(["seed", "megatron"]))


def test_the_nvlink_placer_matches_the_brute_force_on_random_clique_instances():
    rng = random.Random(20261127)
    compared = refused = 0
    for i in range(150):
        state, job, model = random_instance(rng)
        spares = rng.choice([0, 0, 1])
        optimum = brute_force_cliques(state, job, model, 1, spares)
        try:
            placement = NVLinkPlacer(state, spares=spares).place(job, model)
        except PlacementInfeasible:
            assert optimum is None, f"instance {i}: refused but {optimum} exists ({job.describe()})"
            refused += 1
            continue
        assert optimum is not None, f"instance {i}: placed where the brute force finds nothing"
        assert placement.cost.total_ms == pytest.approx(optimum, rel=1e-9, abs=1e-9), (i, job.describe())
        compared += 1
    assert compared >= 60 and refused >= 5


def test_the_nvlink_placer_equals_the_milp_optimum_of_its_tier_on_mixed_clusters():
    """Random partly used clusters of NVL72 racks and 0-4 HGX nodes: a job the HGX nodes take costs the MILP
    optimum over the HGX nodes; a job on cliques costs the MILP optimum of the clique topology."""
    from paralleljob.core.nvl72.nvlink import CliqueState
    from paralleljob.milp import solve

    rng = random.Random(7)
    compared = {"hgx": 0, "cliques": 0}
    while min(compared.values()) < 4:
        state = ClusterState(nvl72_topology(rng.randint(3, 6), hgx_nodes=rng.choice([0, 2, 4]), racks_per_spine=2))
        placer = NVLinkPlacer(state)
        for i in range(rng.randint(2, 8)):
            try:
                filler = placer.place(
                    JobSpec(f"f{i}", rng.choice([4, 8]), rng.randint(1, 4), rng.randint(1, 3), 1), cost_model("seed")
                )
            except PlacementInfeasible:
                continue
            state.allocate(Allocation(f"f{i}", filler.groups, 1.0))
        job = JobSpec("job", rng.choice([4, 8, 16]), rng.randint(1, 3), rng.randint(2, 3), 10.0)
        try:
            placement = placer.place(job, cost_model("seed"))
        except PlacementInfeasible:
            continue
        index = clique_index(state.topology)
        if all(n in index.single_nodes for n in placement.group_nodes):
            trays = [n for n in index.clique_trays if state.node_schedulable[n]]
            for n in trays:
                state.set_node_schedulable(n, False)
            result = solve(state, job, time_limit_s=60)
            for n in trays:
                state.set_node_schedulable(n, True)
            tier = "hgx"
        else:
            # The MILP of the clique topology counted in GPUs, with the real job: an independent optimum.
            free = [len(trays) * 4 for trays in (whole_free_trays(state, 1)[d] for d in index.cliques)]
            result = solve(CliqueState(index.derived(1), free), job, time_limit_s=60)
            tier = "cliques"
        assert result.optimal and result.cost_ms is not None
        assert placement.cost.total_ms == pytest.approx(result.cost_ms, rel=1e-9, abs=1e-9), (tier, job.describe())
        compared[tier] += 1


def test_tp8_takes_two_whole_trays_of_one_clique_in_rank_order():
    state = ClusterState(nvl72_topology(2))
    placement = NVLinkPlacer(state).place(JobSpec("j", 8, 4, 2, 10.0), cost_model("megatron"))
    topo = state.topology
    for group in placement.groups:
        trays = [topo.gpu_node[g] for g in group]
        assert len(set(trays)) == 2 and trays == sorted(trays)  # consecutive ranks: tray after tray
        assert len({topo.domain_of[1][n] for n in trays}) == 1
    assert placement.proven_optimal
    assert placement.cost.tp_ms == pytest.approx(cost_model("megatron").tp_ms(JobSpec("j", 8, 4, 2, 10.0), 900.0))


def test_seed_semantics_stay_when_no_level_is_named_the_nvlink_domain():
    topo = Topology.uniform(4, 4, levels=[("rack", 2, 200.0)])
    assert isinstance(make_placer(ClusterState(topo)), Placer)
    with pytest.raises(PlacementInfeasible) as refusal:
        make_placer(ClusterState(topo)).place(JobSpec("j", 8, 1, 1, 10.0), cost_model("seed"))
    assert refusal.value.permanent and "in one node" in refusal.value.reasons[0]


def test_a_mixed_cluster_keeps_small_tp_on_hgx_nodes_while_they_have_room():
    state = ClusterState(nvl72_topology(2, hgx_nodes=4))
    topo, placer, model = state.topology, NVLinkPlacer(state), cost_model("megatron")
    placement = placer.place(JobSpec("small", 4, 1, 4, 10.0), model)
    assert all(topo.node_names[n].startswith("hgx-") for n in placement.group_nodes)
    assert "NVLink cliques kept whole" in placement.reasons[-1]
    state.allocate(Allocation("hgx-fill", tuple((g,) for g in range(72 * 2, topo.num_gpus)), 10.0))
    placement = placer.place(JobSpec("small", 4, 1, 4, 10.0), model)
    assert all(topo.node_names[n].startswith("rack-") for n in placement.group_nodes)
    assert len({topo.domain_of[1][n] for n in placement.group_nodes}) == 1  # one clique: DP on NVLink


def test_a_job_restricted_to_one_product_uses_only_its_nodes():
    state = ClusterState(nvl72_topology(1, hgx_nodes=2))
    topo = state.topology
    gb200 = frozenset(n for n in range(topo.num_nodes) if topo.node_names[n].startswith("rack-"))
    placer = FilteredPlacer(NVLinkPlacer(state), state, lambda job: NodeFilter(gb200, why=("GPU product GB200",)))
    placement = placer.place(JobSpec("j", 4, 1, 2, 10.0), cost_model("seed"))
    assert set(placement.group_nodes) <= gb200


def test_tp8_that_no_clique_can_hold_waits_saying_so():
    state = ClusterState(nvl72_topology(2))
    topo = state.topology
    # every tray but one per rack partly used: 2 whole free trays in all, one per clique
    partly = [topo.node_gpus(n)[0] for n in range(topo.num_nodes) if n % 18 != 0]
    state.allocate(Allocation("other", tuple((g,) for g in partly), 1.0))
    with pytest.raises(PlacementInfeasible) as refusal:
        NVLinkPlacer(state).place(JobSpec("j", 8, 1, 1, 10.0), cost_model("seed"))
    assert not refusal.value.permanent
    text = " ".join(refusal.value.reasons)
    assert "inside one NVLink domain (2 whole free tray(s) of one clique)" in text
    assert "roomiest clique has 1 whole free trays" in text


def test_tp_beyond_any_clique_is_refused_for_good():
    topo = nvl72_topology(1)
    assert nvlink_never_fits(topo, JobSpec("j", 6, 1, 1, 10.0))  # not a multiple of the tray
    assert not nvlink_never_fits(topo, JobSpec("j", 64, 1, 1, 10.0))
    with pytest.raises(PlacementInfeasible) as refusal:
        NVLinkPlacer(ClusterState(topo)).place(JobSpec("j", 64, 2, 1, 10.0), cost_model("seed"))
    assert refusal.value.permanent and "NVLink domains hold only 1" in refusal.value.reasons[0]


def test_warm_spares_take_no_new_gang_and_replace_a_failed_tray_inside_the_clique():
    state = ClusterState(nvl72_topology(2))
    topo, model = state.topology, cost_model("megatron")
    placer = NVLinkPlacer(state, spares=2)
    job = JobSpec("j", 8, 4, 2, 10.0)  # 16 trays: one clique's 18 less its 2 spares
    placement = placer.place(job, model)
    clique = {topo.domain_of[1][n] for n in placement.group_nodes}
    assert len(clique) == 1
    state.allocate(Allocation("j", placement.groups, 10.0))
    with pytest.raises(PlacementInfeasible) as refusal:  # 18 trays: the other clique offers 16, this one 0
        placer.place(JobSpec("k", 8, 1, 9, 10.0), model)
    assert "2 per clique held back as warm spares" in " ".join(refusal.value.reasons)
    assert placer.place(JobSpec("k", 8, 1, 8, 10.0), model).proven_optimal
    failed = placement.groups[3][5]
    state.set_health(failed, GPUHealth.OFFLINE)
    previous = state.release("j")
    assert previous is not None
    repaired = placer.place(job, model, previous)
    trays = {topo.gpu_node[g] for grp in repaired.groups for g in grp}
    old = {topo.gpu_node[g] for g in previous.gpus}
    assert {topo.domain_of[1][n] for n in trays} == clique
    assert len(trays - old) == 1 and topo.gpu_node[failed] not in trays
    assert "repaired inside its cliques" in repaired.reasons[-1]
    # only the failed tray's ranks move: every other GPU keeps its rank
    moved = [
        a != b
        for grp_a, grp_b in zip(previous.groups, repaired.groups, strict=True)
        for a, b in zip(grp_a, grp_b, strict=True)
    ]
    assert sum(moved) == 4
    state.allocate(Allocation("j", repaired.groups, 10.0))
    # two more failures: one spare left, then none; the repair leaves the clique and says why
    for _ in range(2):
        broken = next(g for g in repaired.groups[0] if state.health[g] is GPUHealth.HEALTHY)
        state.set_health(broken, GPUHealth.OFFLINE)
        previous = state.release("j")
        assert previous is not None
        repaired = placer.place(job, model, previous)
        state.allocate(Allocation("j", repaired.groups, 10.0))
    home = clique.pop()
    assert "no spare tray left in clique" in repaired.reasons[-1]
    # minimal (the default strategy): only the broken TP group leaves, whole, for the other rack's spares;
    # placing afresh re-created most pods, moving healthy ranks between trays of the same clique (issue 39)
    assert "only the broken TP groups moved (2 tray(s) from clique" in repaired.reasons[-1]
    assert {topo.domain_of[1][topo.gpu_node[g]] for g in repaired.groups[0]} == {1 - home}
    assert all(topo.domain_of[1][topo.gpu_node[g]] == home for grp in repaired.groups[1:] for g in grp)
    assert [a == b for a, b in zip(previous.groups, repaired.groups, strict=True)] == [False] + [True] * 7
    # full: the cheapest way out is the whole job in the other (empty) rack, one ComputeDomain again
    state.release("j")
    afresh = placer.place(job, model)
    assert {topo.domain_of[1][topo.gpu_node[g]] for g in afresh.gpus} == {1 - home}
    assert afresh.cost.total_ms < repaired.cost.total_ms


def test_a_repair_with_no_room_anywhere_requeues_saying_why():
    state = ClusterState(nvl72_topology(1))
    placer, model = NVLinkPlacer(state), cost_model("seed")
    job = JobSpec("j", 8, 9, 1, 10.0)  # all 18 trays
    placement = placer.place(job, model)
    state.allocate(Allocation("j", placement.groups, 10.0))
    state.set_health(placement.groups[0][0], GPUHealth.OFFLINE)
    previous = state.release("j")
    assert previous is not None
    with pytest.raises(PlacementInfeasible) as refusal:
        placer.place(job, model, previous)
    assert refusal.value.reasons[0].startswith("no spare tray left in clique clique-0")


@pytest.mark.parametrize("order", [RankOrder.TP_DP_PP, RankOrder.TP_PP_DP])
@pytest.mark.parametrize("shape", [(8, 4, 2), (16, 2, 2), (4, 3, 2), (8, 1, 9)])
def test_tray_pods_hold_one_aligned_block_of_ranks_each_in_rank_order(order, shape):
    tp, pp, dp = shape
    state = ClusterState(nvl72_topology(2))
    topo = state.topology
    placement = NVLinkPlacer(state, rank_order=order).place(JobSpec("j", tp, pp, dp, 10.0), cost_model("seed"))
    pods = tray_pods(topo, placement.groups, tp, pp, dp, order)
    assert [pod.node_rank for pod in pods] == list(range(tp * pp * dp // 4))
    for pod in pods:
        assert pod.ranks == tuple(range(4 * pod.node_rank, 4 * pod.node_rank + 4))
        assert {topo.gpu_node[g] for g in pod.gpus} == {pod.node}
        assert len(pod.groups) == 1 and pod.tp_offset == pod.ranks[0] % tp
        d, p = divmod(pod.groups[0], pp)
        assert pod.ranks[0] // tp == node_rank(order, d, p, pp, dp)
    assert len({pod.node for pod in pods}) == len(pods)


def test_tray_pods_refuse_trays_whose_ranks_are_not_one_block():
    topo = nvl72_topology(1)
    # TP2xPP2xDP2 laid by hand with replica 0's chain on tray 0: ranks 0,1 and 6,7 there
    groups = [(0, 1), (4, 5), (6, 7), (2, 3)]
    with pytest.raises(InvalidRequest, match="not one aligned block"):
        tray_pods(topo, groups, 2, 2, 2, RankOrder.TP_DP_PP)

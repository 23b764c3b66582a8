"""What ``paralleljob bench native`` and ``bench kueue`` submit and how they score (``devtools/native_set.py``)."""

from __future__ import annotations

import random

import pytest

from paralleljob.core import ClusterState, JobSpec, Placer, Topology, cost_model
from paralleljob.devtools.bench_kueue import rack_free
from paralleljob.devtools.native_set import (
    background,
    churned_background,
    depart,
    llm_set,
    place_random_jobs,
    placement_cost,
    step_ms,
    used_per_node,
)


def test_the_llm_set_spans_the_issues_shapes_fits_a_rack_and_alternates_cost_models() -> None:
    gangs = llm_set(48, 256, seed=1)
    assert len(gangs) == 48 and len({g.name for g in gangs}) == 48
    assert all(g.tp in (2, 4, 8) and g.pp in (1, 2, 4, 8) and 1 <= g.dp <= 32 for g in gangs)
    assert all(g.gpus <= 256 and g.pods <= 64 for g in gangs)
    assert [g.cost_model for g in gangs[:4]] == ["seed", "megatron", "seed", "megatron"]
    assert llm_set(48, 256, seed=1) == gangs  # seeded: both schedulers get the same set


def test_the_background_fills_about_half_the_cluster_the_same_way_every_time() -> None:
    used = background(64, 32, 0.5, seed=3)
    assert 0.5 * 512 <= sum(used.values()) <= 0.5 * 512 + 64
    assert all(0 < gpus <= 8 for gpus in used.values())
    assert background(64, 32, 0.5, seed=3) == used


def _racks_with_a_fair_share(used: dict[int, int], nodes: int) -> int:
    """Racks holding at least half of an even share of the free GPUs."""
    free = rack_free(used, nodes)
    return sum(1 for f in free if f >= sum(free) / len(free) / 2)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_churned_background_is_as_full_but_leaves_free_gpus_on_more_racks_than_the_packed_one(seed: int) -> None:
    churned, packed = churned_background(128, 32, 0.5, seed), background(128, 32, 0.5, seed)
    assert churned_background(128, 32, 0.5, seed) == churned  # seeded: both sides get the same cluster
    assert 0.5 * 1024 - 64 <= sum(churned.values()) <= 0.5 * 1024  # departures stop at the target
    assert all(0 < gpus <= 8 for gpus in churned.values())
    assert churned != packed
    # packed leaves about half its free GPUs on one empty rack and almost none on two full ones
    assert _racks_with_a_fair_share(churned, 128) > _racks_with_a_fair_share(packed, 128)
    assert max(rack_free(churned, 128)) < max(rack_free(packed, 128))


def test_departures_release_whole_random_jobs_until_the_target_and_keep_the_rest_as_placed() -> None:
    state = ClusterState(Topology.uniform(16, 8, levels=[("rack", 8, 200.0)]))
    live = place_random_jobs(state, Placer(state), random.Random(5), 100, 64)
    before = {job.job_id: state.allocations[job.job_id].gpus for job in live}
    gone = depart(state, live, random.Random(6), 40)
    assert gone and sum(job.num_gpus for job in live) <= 40 < sum(job.num_gpus for job in live) + gone[-1].num_gpus
    assert all(job.job_id not in state.allocations for job in gone)
    assert all(state.allocations[job.job_id].gpus == before[job.job_id] for job in live)
    assert sum(used_per_node(state).values()) == sum(job.num_gpus for job in live)


@pytest.mark.parametrize("model", ["seed", "megatron"])
def test_a_placement_is_scored_as_the_placer_scores_it(model: str) -> None:
    topology = Topology.uniform(8, 8, levels=[("rack", 4, 200.0)])
    job = JobSpec("j", 4, 2, 2, 10.0)
    placement = Placer(ClusterState(topology)).place(job, cost_model(model))
    names = {f"n{i}": i for i in range(8)}
    nodes = [f"n{n}" for n in placement.group_nodes]
    assert placement_cost(topology, names, job, model, nodes) == pytest.approx(placement.cost.total_ms)
    spread = ["n0", "n4", "n1", "n5"]  # each stage's replicas in different racks: dearer
    assert placement_cost(topology, names, job, model, spread) > placement.cost.total_ms
    assert step_ms(job, 100.0) - step_ms(job, 0.0) == pytest.approx(100.0)  # no overlap by default


def test_headroom_scores_each_gang_against_the_empty_clusters_lower_bound() -> None:
    from paralleljob.devtools.native_headroom import headroom

    rows = headroom(128, 6, seed=1)
    assert len(rows) == 6
    for shape, model, ours, bound in rows:
        assert shape.startswith("TP") and model in ("seed", "megatron")
        assert ours >= bound - 1e-6  # nothing beats the bound; equal where the placer found the optimum

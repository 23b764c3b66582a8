"""What ``paralleljob bench native`` submits and how it scores (``devtools/native_set.py``)."""

from __future__ import annotations

import pytest

from paralleljob.core import ClusterState, JobSpec, Placer, Topology, cost_model
from paralleljob.devtools.native_set import background, llm_set, placement_cost, step_ms


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

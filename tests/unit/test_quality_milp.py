"""The placer against an exact MILP (HiGHS) on medium clusters where brute force is out of reach."""

from __future__ import annotations

import random

import pytest

from paralleljob.bench import quality_instance
from paralleljob.core import PlacementInfeasible, Placer, cost_model
from paralleljob.milp import solve


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [8, 16])
def test_placer_equals_the_milp_optimum(nodes):
    rng = random.Random(1000 + nodes)
    model = cost_model("seed")
    compared = 0
    while compared < 5:
        state, job = quality_instance(rng, nodes)
        try:
            placement = Placer(state).place(job, model)
        except PlacementInfeasible:
            continue
        result = solve(state, job, time_limit_s=60)
        assert result.cost_ms is not None and result.optimal
        assert placement.cost.total_ms == pytest.approx(result.cost_ms, rel=1e-9, abs=1e-9), job.describe()
        compared += 1

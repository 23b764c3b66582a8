"""The placer's cost equals the brute-force optimum on hundreds of random small instances."""

from __future__ import annotations

import random

import pytest

from paralleljob.core import (
    Allocation,
    ClusterState,
    GPUHealth,
    JobSpec,
    ModelShape,
    PlacementInfeasible,
    Placer,
    Topology,
    cost_model,
)

from .bruteforce import brute_force_optimum

INSTANCES = 360


def random_instance(rng: random.Random):
    num_nodes = rng.randint(2, 4)
    gpn = rng.choice([4, 8, 8])
    if num_nodes == 4 and rng.random() < 0.5:
        topo = Topology.uniform(num_nodes, gpn, levels=[("rack", 2, 200.0)])
    else:
        topo = Topology.uniform(num_nodes, gpn)
    state = ClusterState(topo)
    # holes: random GPUs used by other jobs or failed
    gpus = list(range(topo.num_gpus))
    rng.shuffle(gpus)
    holes = gpus[: rng.randint(0, topo.num_gpus // 2)]
    for i, g in enumerate(holes):
        if rng.random() < 0.3:
            state.set_health(g, GPUHealth.OFFLINE)
        else:
            state.allocate(Allocation(f"other-{i}", ((g,),), 10.0))
    free = topo.num_gpus - len(holes)
    while True:
        tp = rng.choice([1, 1, 2, 2, 4, 8])
        pp = rng.randint(1, 4)
        dp = rng.randint(1, 4)
        if tp <= gpn and pp * dp <= 7 and tp * pp * dp <= max(free, 1):
            break
    model = ModelShape(
        hidden_dim=rng.choice([1024, 4096, 8192]),
        seq_len=rng.choice([512, 2048, 8192]),
        micro_batch_size=rng.choice([1, 2, 8]),
        num_params_billions=rng.choice([0.01, 0.1, 1.0, 7.0, 70.0]),
    )
    job = JobSpec("job", tp, pp, dp, 40.0, model)
    return state, job, cost_model(rng.choice(["seed", "megatron"]))


@pytest.mark.slow
def test_placer_matches_brute_force_on_random_small_instances():
    rng = random.Random(20261121)
    compared = mismatches = 0
    for i in range(INSTANCES):
        state, job, model = random_instance(rng)
        optimum = brute_force_optimum(state, job, model)
        try:
            placement = Placer(state).place(job, model)
        except PlacementInfeasible:
            assert optimum is None, f"instance {i}: placer refused but {optimum} exists"
            continue
        assert optimum is not None
        compared += 1
        if abs(placement.cost.total_ms - optimum) > 1e-6 * max(1.0, optimum):
            mismatches += 1
            print(f"instance {i}: {job.describe()} placer {placement.cost.total_ms} optimum {optimum}")
    assert mismatches == 0
    assert compared >= 300

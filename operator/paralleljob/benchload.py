"""The background load the placement benchmarks start from (``paralleljob bench`` and ``bench nvl72``): a
cluster filled to about half with random seeded jobs and a few GPUs offline, and the clock they are timed by.
"""

from __future__ import annotations

import random
import time

from paralleljob.core import Allocation, ClusterState, GPUHealth, JobSpec, PlacementInfeasible, Placer, cost_model
from paralleljob.core.placing.placement import PlacerLike

FILL_SHAPES = ((1, 2, 4, 8), (1, 1, 2, 4), (1, 2, 4, 8))  # TP, PP, DP choices of the background jobs

# CPU time of this process: on a shared machine wall time also counts waiting for a core, which says more
# about the neighbours than about the placer. Wall time is reported next to it for the main placement.
clock = time.process_time


def fill(
    state: ClusterState,
    seed: int,
    target: float = 0.5,
    placer: PlacerLike | None = None,
    shapes: tuple[tuple[int, ...], ...] = FILL_SHAPES,
) -> int:
    """Fill ``state`` to about ``target`` with random seeded jobs of ``shapes`` (TP, PP, DP choices), placed by
    ``placer`` (the core's by default), and take 0.5% of the GPUs offline; returns how many jobs were tried."""
    rng = random.Random(seed)
    model = cost_model("seed")
    placer = placer or Placer(state)
    total = state.topology.num_gpus
    allocated, n = 0, 0
    while allocated < target * total * 0.97:
        tp, pp, dp = (rng.choice(choices) for choices in shapes)
        job = JobSpec(f"fill-{n}", tp, pp, dp, 40.0)
        n += 1
        try:
            placement = placer.place(job, model)
        except PlacementInfeasible:
            continue
        state.allocate(Allocation(job.job_id, placement.groups, job.memory_per_gpu_gb))
        allocated += job.num_gpus
    for gpu in rng.sample(range(total), total // 200):
        if state.owner[gpu] is None:
            state.set_health(gpu, GPUHealth.OFFLINE)
    return n

"""A Philly-like workload: mostly single-GPU jobs, some of 2, 4 and 8 GPUs, long-tailed durations.

Issue 43 reported that on a held-out trace of this kind (nodes of 2-8 GPUs, mostly 1-GPU jobs, a FIFO
queue, Llama 3 failure rates) our policy lost to best-fit while the simulator's own workloads showed a tie.
Where placement barely matters, every difference between the two comes from the failure path (which node
a repaired job goes to, whether it keeps its intact ranks) and then spreads through the queue, so the
simulator checks itself on this workload too (``python -m paralleljob.sim.report.evidence small-nodes``).

The size mix (weights 16:2:1:1, 80% single-GPU) and the durations (log-normal, sigma 1.5, a heavier tail
than the mixed workload's) are assumptions in the shape that public traces of shared research clusters
report (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads",
ATC'19: most jobs use one GPU, run times span minutes to days), not figures taken from one. Shapes as for a
trace's GPU counts (SPEC section 8); arrivals Poisson at the rate that offers ``load`` of the cluster. A pure
function of its arguments and seed.
"""

from __future__ import annotations

import math
import random

from paralleljob.sim.workload.trace import TraceJob, shape_for

SIZES = (1, 2, 4, 8)
SIZE_WEIGHTS = (16, 2, 1, 1)


def small_jobs_workload(
    jobs: int, cluster_gpus: int, *, seed: int, load: float = 0.9, mean_hours: float = 4.0, sigma: float = 1.5
) -> list[TraceJob]:
    """``jobs`` jobs of 1-8 GPUs offering ``load`` of a ``cluster_gpus`` cluster, four teams."""
    if jobs < 1 or cluster_gpus < 8 or not load > 0 or not mean_hours > 0 or not sigma >= 0:
        raise ValueError("need jobs >= 1, cluster_gpus >= 8, load > 0, mean_hours > 0 and sigma >= 0")
    rng = random.Random(f"small-jobs:{seed}")
    drafts = []
    for _ in range(jobs):
        shape = shape_for(rng.choices(SIZES, weights=SIZE_WEIGHTS)[0], rng)
        # log-normal with the given mean: mu = ln(mean) - sigma^2 / 2
        drafts.append((rng.lognormvariate(math.log(mean_hours * 3600.0) - sigma**2 / 2, sigma), shape))
    work = math.fsum(duration * tp * pp * dp for duration, (tp, pp, dp) in drafts)
    rate = jobs * load * cluster_gpus / work  # arrivals per second for that offered load
    now, out = 0.0, []
    for i, (duration, (tp, pp, dp)) in enumerate(drafts):
        out.append(TraceJob(f"small-{i:06d}", now, duration, tp * pp * dp, f"team-{i % 4}", (tp, pp, dp), None))
        now += rng.expovariate(rate)
    return out

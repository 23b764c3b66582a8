"""A synthetic LLM workload for GB200 NVL72 clusters (``simulate --workload llm-nvl72``).

Most jobs are 3D-parallel LLM training with TP8 (2 trays per TP group) or TP16 (4 trays), PP 1-4 and DP 1-8,
capped at a quarter of the cluster; the rest are single-tray jobs (TP4, or 1-2 GPUs). Durations are log-normal
(sigma 1) around 8 h for LLM jobs and 1 h for the small ones; arrivals Poisson at the rate that offers ``load``
x the cluster's GPU-time over the arrival period. Model sizes grow with TP x PP (2B parameters per GPU of a
replica), so the cost model prices them like the published layouts.
"""

from __future__ import annotations

import math
import random

from paralleljob.core.job import ModelShape
from paralleljob.sim.workload.trace import TraceJob


def llm_nvl72_workload(
    jobs: int, cluster_gpus: int, *, seed: int, load: float = 0.8, llm_share: float = 0.6
) -> list[TraceJob]:
    if jobs < 1 or cluster_gpus < 72 or not load > 0:
        raise ValueError("need jobs >= 1, cluster_gpus >= 72 (one rack) and load > 0")
    rng = random.Random(f"llm-nvl72:{seed}")
    drafts = []
    for i in range(jobs):
        if rng.random() < llm_share:
            while True:
                tp = rng.choices((8, 16), weights=(3, 1))[0]
                pp, dp = rng.choice((1, 2, 4)), rng.choice((1, 2, 4, 8))
                if tp * pp * dp <= max(tp, cluster_gpus // 4):
                    break
            shape = (tp, pp, dp)
            model = ModelShape(hidden_dim=8192, seq_len=4096, num_params_billions=2.0 * tp * pp)
            mean, tenant = 8.0, "llm"
        else:
            shape = rng.choice(((4, 1, 1), (2, 1, 1), (1, 1, 1), (2, 2, 1)))
            model, mean, tenant = None, 1.0, f"team-{i % 4}"
        duration = rng.lognormvariate(math.log(mean * 3600.0) - 0.5, 1.0)
        drafts.append((duration, shape, model, tenant))
    work = math.fsum(d * s[0] * s[1] * s[2] for d, s, _, _ in drafts)
    rate = jobs * load * cluster_gpus / work
    now, out = 0.0, []
    for i, (duration, shape, model, tenant) in enumerate(drafts):
        out.append(TraceJob(f"nvl-{i:06d}", now, duration, shape[0] * shape[1] * shape[2], tenant, shape, model))
        now += rng.expovariate(rate)
    return out

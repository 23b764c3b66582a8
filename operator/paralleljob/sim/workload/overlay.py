"""3D-parallel workloads: published LLM training layouts, overlaid on a trace's arrivals, and a mixed workload.

Public GPU-cluster traces record GPU counts, not how a job split its model; a shape guessed from a count
(SPEC section 8) is mostly TP-only or DP-only and leaves no room for the layouts a rank-aware placer is
for. This module takes shapes from published training runs instead:

* Megatron-LM's weak-scaling table (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM", SC'21, Table 1): GPT models of 1.7B to 1T parameters with their hidden size,
  layers, TP, PP, GPU count and global batch, at sequence length 2048.
* Llama 3 405B (Llama Team, "The Llama 3 Herd of Models", 2024, Table 4): TP8 x PP16 x DP64 on 8,192
  GPUs, sequence length 8192, 16M tokens per batch (context parallelism, used only for long context, left
  out).

:func:`overlay_3d` keeps every trace job's submit time and duration and replaces a seeded share of them
(``share``) with a layout from the table that fits ``max_gpus``, in tenant ``llm`` (an LLM team, so
per-tenant quotas see it as one); the other jobs keep their tenant. DP is scaled down (by powers of two,
at least 1) when the published GPU count exceeds it, keeping the global batch, so each replica does more
micro-batches per step. :func:`mixed_workload` draws a whole workload: Poisson arrivals, many small
(1-8 GPU) jobs and a share of large 3D-parallel ones, durations log-normal, the arrival rate set for an
offered load. Both are pure functions of their arguments and seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from paralleljob.core.job import ModelShape
from paralleljob.sim.workload.trace import TraceJob, shape_for


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    params_billions: float
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int  # as published
    global_batch: int
    seq_len: int = 2048

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


PUBLISHED_LAYOUTS: tuple[Layout, ...] = (
    # Megatron-LM SC'21 Table 1 (A100 80 GB, DGX nodes of 8)
    Layout("gpt-1.7b", 1.7, 2304, 24, 1, 1, 32, 512),
    Layout("gpt-3.6b", 3.6, 3072, 30, 2, 1, 64, 512),
    Layout("gpt-7.5b", 7.5, 4096, 36, 4, 1, 128, 512),
    Layout("gpt-18b", 18.4, 6144, 40, 8, 1, 256, 1024),
    Layout("gpt-39b", 39.1, 8192, 48, 8, 2, 512, 1536),
    Layout("gpt-76b", 76.1, 10240, 60, 8, 4, 1024, 1792),
    Layout("gpt-146b", 145.6, 12288, 80, 8, 8, 1536, 2304),
    Layout("gpt-310b", 310.1, 16384, 96, 8, 16, 1920, 2160),
    Layout("gpt-530b", 529.6, 20480, 105, 8, 35, 2520, 2520),
    Layout("gpt-1t", 1008.0, 25600, 128, 8, 64, 3072, 3072),
    # Llama 3 405B, Table 4, first row (8,192 GPUs)
    Layout("llama3-405b", 405.0, 16384, 126, 8, 16, 8192, 2048, seq_len=8192),
)


def scaled(layout: Layout, max_gpus: int) -> tuple[int, int, int] | None:
    """(tp, pp, dp) of ``layout`` with DP halved until it fits ``max_gpus``; None when one replica does not."""
    if layout.tp * layout.pp > max_gpus:
        return None
    dp = layout.dp
    while dp > 1 and layout.tp * layout.pp * dp > max_gpus:
        dp = max(1, dp // 2)
    return layout.tp, layout.pp, dp


def model_of(layout: Layout, dp: int) -> ModelShape:
    batch = max(layout.global_batch, dp)  # at least one micro-batch per replica
    return ModelShape(
        hidden_dim=layout.hidden, seq_len=layout.seq_len, micro_batch_size=1,
        num_params_billions=layout.params_billions, num_layers=layout.layers, global_batch_size=batch,
    )  # fmt: skip


def _layout_job(job: TraceJob, rng: random.Random, max_gpus: int) -> TraceJob | None:
    fitting = [(lay, shape) for lay in PUBLISHED_LAYOUTS if (shape := scaled(lay, max_gpus)) is not None]
    if not fitting:
        return None
    layout, (tp, pp, dp) = rng.choice(fitting)
    return replace(job, num_gpus=tp * pp * dp, shape=(tp, pp, dp), model=model_of(layout, dp), tenant="llm")


def overlay_3d(trace: Sequence[TraceJob], share: float, max_gpus: int, seed: int) -> list[TraceJob]:
    """The trace with a seeded ``share`` of its jobs replaced by published 3D-parallel layouts."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the 3D overlay share must be in [0, 1], got {share}")
    out = []
    for job in trace:
        rng = random.Random(f"{seed}:overlay:{job.job_id}")  # per job, so a slice does not change a job
        big = _layout_job(job, rng, max_gpus) if rng.random() < share else None
        out.append(big or job)
    return out


def mixed_workload(
    jobs: int, cluster_gpus: int, *, seed: int, load: float = 0.8, large_share: float = 0.1,
    mean_small_hours: float = 1.0, mean_large_hours: float = 12.0,
) -> list[TraceJob]:  # fmt: skip
    """Many small jobs and a few large 3D-parallel ones, at an offered ``load`` of a ``cluster_gpus`` cluster.

    Small jobs: 1, 2, 4 or 8 GPUs (weights 4:2:1:2, as in public traces where single-GPU jobs dominate and
    whole-node jobs are common), shapes as for a trace's GPU counts. Large: a published layout that fits a
    quarter of the cluster. Durations log-normal (sigma 1) around the two means. Arrivals Poisson, at the
    rate that offers ``load`` x cluster GPU-time over the arrival period."""
    if jobs < 1 or cluster_gpus < 8 or not load > 0 or not 0 <= large_share <= 1:
        raise ValueError("need jobs >= 1, cluster_gpus >= 8, load > 0 and large_share in [0, 1]")
    rng = random.Random(f"mixed:{seed}")
    sigma = 1.0
    drafts: list[tuple[float, int, tuple[int, int, int], ModelShape | None, str]] = []
    for i in range(jobs):
        if rng.random() < large_share:
            layout, shape = rng.choice(
                [(lay, s) for lay in PUBLISHED_LAYOUTS if (s := scaled(lay, max(8, cluster_gpus // 4))) is not None]
            )
            mean, model, tenant = mean_large_hours, model_of(layout, shape[2]), "llm"
        else:
            gpus = rng.choices((1, 2, 4, 8), weights=(4, 2, 1, 2))[0]
            shape = shape_for(gpus, rng)
            mean, model, tenant = mean_small_hours, None, f"team-{i % 4}"
        # log-normal with the given mean: mu = ln(mean) - sigma^2 / 2
        duration = rng.lognormvariate(math.log(mean * 3600.0) - sigma**2 / 2, sigma)
        drafts.append((duration, shape[0] * shape[1] * shape[2], shape, model, tenant))
    work = math.fsum(d * g for d, g, _, _, _ in drafts)
    rate = jobs * load * cluster_gpus / work  # arrivals per second for that offered load
    now = 0.0
    out = []
    for i, (duration, gpus, shape, model, tenant) in enumerate(drafts):
        out.append(TraceJob(f"mix-{i:06d}", now, duration, gpus, tenant, shape, model))
        now += rng.expovariate(rate)
    return out

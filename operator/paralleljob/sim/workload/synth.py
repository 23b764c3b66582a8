"""A synthetic generic trace, scaled from the Alibaba 2023 distributions, for clusters larger than the trace.

The openb pod list peaks at about 70 GPUs in use, far too little for a 100k-GPU cluster, and has no job
larger than 8 GPUs. This generator keeps its shapes and scales them:

* arrivals: the trace's inter-arrival gaps (gaps over a day, from its sparse early months, are left out),
  resampled and scaled so that ``jobs`` arrivals span ``days``;
* sizes: the trace's GPU counts (1..8, whole-GPU mode) for most jobs; a share ``large_share`` of jobs are
  multi-node, 8 x 2^k GPUs for k = 1..8 with weight 0.8^k (the trace has none; model-parallel training is
  what this scheduler is for, so the benchmark needs them);
* durations: the trace's durations (zero-length pods left out, capped at ``max_duration_hours``),
  resampled, then all stretched by one factor so the offered load (GPU-seconds submitted over GPU-seconds
  available in ``days``) equals ``load``. With the defaults the stretch is about 3 (printed), so a job's
  length keeps the trace's spread, only longer, as training jobs are.

Run ``python -m paralleljob.sim.workload.synth --help``. Same arguments and seed, same file, byte for byte.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from paralleljob.sim.workload.alibaba import read_pods
from paralleljob.sim.workload.trace import TraceJob, write_generic

DAY = 86_400.0
LARGE_EXPONENTS = range(1, 9)  # 16 .. 2048 GPUs
LARGE_WEIGHT = 0.8


def synthesize(
    source: Sequence[TraceJob],
    *,
    jobs: int,
    days: float,
    cluster_gpus: int,
    load: float,
    large_share: float = 0.25,
    max_duration_hours: float = 48.0,
    seed: int = 0,
) -> list[TraceJob]:
    if jobs < 1 or days <= 0 or cluster_gpus < 1 or load <= 0:
        raise ValueError("need jobs >= 1, days > 0, cluster_gpus >= 1 and load > 0")
    rng = random.Random(f"synth:{seed}")
    submits = sorted(job.submit_s for job in source)
    gaps = [b - a for a, b in itertools.pairwise(submits) if 0 <= b - a <= DAY]
    cap = max_duration_hours * 3600.0
    durations = [min(job.duration_s, cap) for job in source if job.duration_s > 0]
    if not gaps or not durations:
        raise ValueError("the source trace has too few jobs to learn from")
    mean_gap = math.fsum(gaps) / len(gaps) or 1.0
    gap_scale = days * DAY / jobs / mean_gap
    weights = [LARGE_WEIGHT**k for k in LARGE_EXPONENTS]
    drafts: list[tuple[float, float, int, str]] = []
    now = 0.0
    for _ in range(jobs):
        now += rng.choice(gaps) * gap_scale
        model = rng.choice(source)
        if rng.random() < large_share:
            gpus = 8 * 2 ** rng.choices(LARGE_EXPONENTS, weights=weights)[0]
            tenant = "train"
        else:
            gpus, tenant = model.num_gpus, model.tenant
        drafts.append((now, rng.choice(durations), gpus, tenant))
    offered = math.fsum(d * g for _, d, g, _ in drafts)
    stretch = load * cluster_gpus * days * DAY / offered
    print(f"durations stretched x{stretch:.2f} for an offered load of {load:g}", file=sys.stderr)
    return [
        TraceJob(f"job-{i:06d}", submit, duration * stretch, gpus, tenant)
        for i, (submit, duration, gpus, tenant) in enumerate(drafts)
        if submit < days * DAY
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paralleljob.sim.workload.synth", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--pods", type=Path, required=True, help="alibaba2023_openb_pods.csv")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--cluster-gpus", type=int, default=100_000)
    parser.add_argument("--load", type=float, default=0.9, help="offered load: submitted / available GPU-time")
    parser.add_argument("--large-share", type=float, default=0.25, help="share of multi-node jobs")
    parser.add_argument("--max-duration-hours", type=float, default=48.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    trace = synthesize(
        read_pods(args.pods),
        jobs=args.jobs,
        days=args.days,
        cluster_gpus=args.cluster_gpus,
        load=args.load,
        large_share=args.large_share,
        max_duration_hours=args.max_duration_hours,
        seed=args.seed,
    )
    # as `simulate --out` does: the docs' `--out sim-out/synth-100k.csv` must work on a fresh checkout
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_generic(args.out, trace)
    gpu_hours = math.fsum(j.duration_s * j.num_gpus for j in trace) / 3600.0
    print(f"wrote {len(trace)} jobs ({gpu_hours:,.0f} GPU-hours) to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

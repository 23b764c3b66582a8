"""Issue 40's evidence: moves that free room against no moves, clique best-fit and preemption, on NVL72 racks.

``python -m paralleljob.sim.report.evidence moves`` runs docs/simulator.md's setting (64 GB200 NVL72 racks,
2 warm spare trays each, 1,500 jobs of the LLM workload at load 0.7, FIFO that lets jobs that fit pass a head
that does not, Llama 3 failure rates, Young/Daly checkpoints) for each seed and policy, and prints the median
over the seeds with the spread (lowest and highest) of the large jobs' (TP 8 and up) wait p50 and p95, mean
JCT, GPU allocation over the busy period, the GPU-time lost (failures and moves, share of the cluster's),
the moves and the moves back; then each seed's large-job p95 against the policy without moves.

Each (seed, policy) run's metrics are kept as JSON under ``--keep DIR`` and read back instead of running it
again, so the seeds can run as separate processes (``--first-seed S --seeds 1``) and one last call prints the
table over all of them. Minutes a run: not part of the test suite.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.sim.cluster.failures import load_failure_stats
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.llmnvl import llm_nvl72_workload

POLICIES = ("ours-nvl72-moves", "ours-nvl72-spares2", "clique-best-fit-spares2", "ours-nvl72-preempt")
NO_MOVES = "ours-nvl72-spares2"
HOUR = 3600.0


def run_one(racks: int, jobs: int, policy: str, seed: int, traces: Path) -> dict[str, Any]:
    stats = load_failure_stats(traces / "failure_stats.csv")
    topology = nvl72_topology(racks)
    trace = llm_nvl72_workload(jobs, topology.num_gpus, seed=seed, load=0.7)
    config = SimConfig(
        policy=policy, queue="fifo-skip", failure_rate=stats.rates["llama3"], causes=stats.causes, seed=seed
    )
    metrics: dict[str, Any] = Simulation(topology, trace, config).run().metrics
    return metrics


def kept(keep: Path | None, racks: int, jobs: int, policy: str, seed: int, run: Callable[[], dict[str, Any]]) -> Any:
    """The run's metrics from ``keep`` when a run stored them, else run it (and store them)."""
    path = keep / f"{racks}racks-{jobs}jobs-{policy}-seed{seed}.json" if keep is not None else None
    if path is not None and path.is_file():
        return json.loads(path.read_text())
    metrics = run()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(metrics))
    return metrics


def _spread(values: Sequence[float | None], scale: float, digits: int) -> str:
    present = [v * scale for v in values if v is not None]
    if not present:
        return "-"
    middle = f"{statistics.median(present):,.{digits}f}"
    return middle if len(present) == 1 else f"{middle} ({min(present):,.{digits}f}-{max(present):,.{digits}f})"


def _row(runs: Sequence[dict[str, Any]]) -> list[str]:
    wait = [r["large_job_wait_s"] for r in runs]
    lost = [r["goodput_lost"] for r in runs]
    room = [r.get("room_moves") for r in runs]
    moved = "-"
    if all(m is not None for m in room):
        counts = [float(m["moves"] + m["stopped"]) for m in room if m is not None]
        hours = [m["lost_work_gpu_hours"] + m["restart_gpu_hours"] for m in room if m is not None]
        plans = [float(m["plans"]) for m in room if m is not None]
        moved = f"{_spread(counts, 1, 0)} / {_spread(hours, 1, 1)} / {_spread(plans, 1, 0)}"
    return [
        _spread([w["p50"] for w in wait], 1 / HOUR, 1),
        _spread([w["p95"] for w in wait], 1 / HOUR, 1),
        _spread([r["jct_s"]["mean"] for r in runs], 1 / HOUR, 1),
        _spread([r["gpu_allocation_busy_period"] for r in runs], 100.0, 1),
        _spread([g["total_gpu_hours"] for g in lost], 1, 0) + " (" + _spread([g["share_of_capacity"] for g in lost],
                                                                            100.0, 2) + "%)",
        moved,
        _spread([float(r.get("migrations_back", 0)) for r in runs], 1, 0),
    ]  # fmt: skip


def moves_table(
    seeds: Sequence[int], traces: Path, racks: int = 64, jobs: int = 1500, policies: Sequence[str] = POLICIES[:3],
    keep: Path | None = None,
) -> str:  # fmt: skip
    by_policy = {p: [kept(keep, racks, jobs, p, s, partial(run_one, racks, jobs, p, s, traces)) for s in seeds]
                 for p in policies}  # fmt: skip
    lines = [
        f"{racks} NVL72 racks, {jobs:,} jobs, seeds {', '.join(map(str, seeds))}: median (lowest-highest) over seeds",
        "",
        "| policy | large-job wait p50 (h) | large-job wait p95 (h) | mean JCT (h) | GPU allocation, busy period (%)"
        " | lost GPU-hours (share of the cluster's) | moves or stops / their lost GPU-hours / plans | moves back |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| `{p}` | " + " | ".join(_row(runs)) + " |" for p, runs in by_policy.items()]
    if NO_MOVES in by_policy:
        base = [r["large_job_wait_s"]["p95"] for r in by_policy[NO_MOVES]]
        for p, runs in by_policy.items():
            if p != NO_MOVES:
                ratios = [r["large_job_wait_s"]["p95"] / b for r, b in zip(runs, base, strict=True) if b]
                lines.append(f"\n{p}: large-job p95 / no moves per seed: " + " ".join(f"{x:.2f}" for x in ratios))
    return "\n".join(lines)

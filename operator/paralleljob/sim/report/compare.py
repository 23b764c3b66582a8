"""Several seeds, side by side: means with 95% confidence intervals, and ratios to each baseline.

Each seed is one replication: job shapes, overlays, synthetic workloads and failures are drawn from it; the
cluster is not. A metric's interval is Student's t over the per-seed values; a ratio to a baseline is taken
per seed (the same jobs and failures on both sides) and then averaged, so the pairing removes the
seed-to-seed spread that both policies share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# (key, path into one policy's metrics, lower is better?)
METRICS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("jct_mean_s", ("jct_s", "mean"), True),
    ("jct_p99_s", ("jct_s", "p99"), True),
    ("queueing_mean_s", ("queueing_delay_s", "mean"), True),
    ("makespan_s", ("makespan_s",), True),
    ("allocation_busy", ("gpu_allocation_busy_period",), False),
    ("fragmentation_mean", ("fragmentation_mean",), True),
    ("slowdown_mean", ("slowdown_multi_gpu_jobs", "mean"), True),
    ("tp_groups_across_nodes", ("tp_groups_across_nodes",), True),
    ("ettr", ("ettr",), False),
    ("goodput_lost_gpu_hours", ("goodput_lost", "total_gpu_hours"), True),
    ("bytes_above_node", ("bytes_above_node",), True),
    ("jain", ("fairness_jain_mean",), False),
)
# Metrics of what only some runs do (moves back, elastic resizes): summarised when some policy reports them.
OPTIONAL_METRICS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("migrations_back", ("migrations_back",), True),
    ("migrations_back_gpu_hours", ("migrations_back_gpu_hours",), True),
    ("elastic_grows", ("elastic_grows",), False),
    ("elastic_shrinks", ("elastic_shrinks",), True),
    ("elastic_drops", ("elastic_drops",), True),
    ("elastic_resize_gpu_hours", ("elastic_resize_gpu_hours",), True),
)
BASELINES = ("best-fit", "volcano", "first-fit")
RATIO_METRICS = ("jct_mean_s", "jct_p99_s", "queueing_mean_s", "makespan_s", "ettr", "bytes_above_node")
PB = 1e-15

# two-sided 95% Student t quantiles by degrees of freedom (1..10); 1.96 beyond 30
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t95(df: int) -> float:
    if df < 1:
        return math.nan
    if df <= len(_T95):
        return _T95[df - 1]
    return 2.042 if df <= 30 else 1.96


def mean_ci(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, half-width of the 95% interval (None for one value), n."""
    n = len(values)
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0}
    mean = math.fsum(values) / n
    if n == 1:
        return {"mean": mean, "ci95": None, "n": 1}
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return {"mean": mean, "ci95": t95(n - 1) * math.sqrt(var / n), "n": n}


def metric(metrics: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = metrics
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def level_metrics(runs: Mapping[str, Mapping[str, Any]]) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
    """One metric per topology level of the run: the bytes its jobs' steps moved over that level."""
    levels = next(iter(runs.values())).get("bytes_by_level", {})
    return tuple((f"bytes_{name}", ("bytes_by_level", name), True) for name in levels)


def level_label(key: str, first: bool) -> tuple[str, float, int]:
    name = key.removeprefix("bytes_")
    return (f"PB within {name}" if first else f"PB over {name}", PB, 3)


def summarize(by_seed: Mapping[int, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """{"summary": {policy: {metric: mean_ci}}, "ratios": {policy: {baseline: {metric: mean_ci}}}}."""
    first = next(iter(by_seed.values()))
    policies = list(first)
    optional = tuple(m for m in OPTIONAL_METRICS if any(m[1][0] in run for run in first.values()))
    metrics = (*METRICS, *optional, *level_metrics(first))
    summary: dict[str, Any] = {}
    for policy in policies:
        row = {}
        for key, path, _ in metrics:
            values = [v for runs in by_seed.values() if (v := metric(runs[policy], path)) is not None]
            row[key] = mean_ci(values)
        summary[policy] = row
    ratios: dict[str, Any] = {}
    paths = {key: path for key, path, _ in METRICS}
    for policy in policies:
        for baseline in (b for b in BASELINES if b in policies and b != policy):
            row = {}
            for key in RATIO_METRICS:
                values = []
                for runs in by_seed.values():
                    mine, theirs = metric(runs[policy], paths[key]), metric(runs[baseline], paths[key])
                    if mine is not None and theirs:
                        values.append(mine / theirs)
                row[key] = mean_ci(values)
            ratios.setdefault(policy, {})[baseline] = row
    return {"summary": summary, "ratios": ratios}


def fmt_ci(cell: Mapping[str, Any], scale: float = 1.0, digits: int = 2) -> str:
    mean, ci = cell.get("mean"), cell.get("ci95")
    if mean is None:
        return "n/a"
    text = f"{mean * scale:.{digits}f}"
    return text if ci is None else f"{text} ± {ci * scale:.{digits}f}"


LABELS = {
    "jct_mean_s": ("mean JCT (h)", 1 / 3600.0, 2),
    "jct_p99_s": ("p99 JCT (h)", 1 / 3600.0, 2),
    "queueing_mean_s": ("mean queueing (h)", 1 / 3600.0, 2),
    "makespan_s": ("makespan (h)", 1 / 3600.0, 1),
    "allocation_busy": ("allocation, busy period (%)", 100.0, 1),
    "fragmentation_mean": ("stranded GPUs (% of cluster)", 100.0, 2),
    "slowdown_mean": ("slowdown of multi-GPU jobs (x)", 1.0, 3),
    "tp_groups_across_nodes": ("TP groups across nodes", 1.0, 0),
    "ettr": ("ETTR (GPU-weighted)", 1.0, 3),
    "goodput_lost_gpu_hours": ("goodput lost to failures (GPU-h)", 1.0, 1),
    "migrations_back": ("moves back to a cheaper placement", 1.0, 1),
    "migrations_back_gpu_hours": ("GPUs held idle by moves back (GPU-h)", 1.0, 1),
    "elastic_grows": ("elastic grows", 1.0, 1),
    "elastic_shrinks": ("elastic shrinks (for a higher-priority job)", 1.0, 1),
    "elastic_drops": ("elastic drops (a replica lost to a failure)", 1.0, 1),
    "elastic_resize_gpu_hours": ("GPUs held idle by grows and shrinks (GPU-h)", 1.0, 1),
    "bytes_above_node": ("PB above the node", PB, 3),
    "jain": ("Jain's index over tenants (core queues)", 1.0, 3),
}


def label(key: str, first_level: str) -> tuple[str, float, int]:
    if key in LABELS:
        return LABELS[key]
    return level_label(key, key == f"bytes_{first_level}")


def markdown_summary(doc: Mapping[str, Any], seeds: Sequence[int]) -> list[str]:
    summary, ratios = doc["summary"], doc["ratios"]
    names = list(summary)
    lines = [
        f"## Over {len(seeds)} seeds ({', '.join(map(str, seeds))}): mean ± 95% confidence half-width",
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    keys = list(summary[names[0]])
    levels = [k for k in keys if k.startswith("bytes_") and k != "bytes_above_node"]
    first_level = levels[0].removeprefix("bytes_") if levels else ""
    for key in keys:
        if key == "jain" and all(summary[n][key]["mean"] is None for n in names):
            continue  # only the core queues measure fairness between tenants
        text, scale, digits = label(key, first_level)
        lines.append(f"| {text} | " + " | ".join(fmt_ci(summary[n][key], scale, digits) for n in names) + " |")
    if ratios:
        lines += ["", "### Ratios, per seed then averaged (< 1: lower than the baseline)", ""]
        lines += ["| policy / baseline | " + " | ".join(LABELS[k][0] for k in RATIO_METRICS) + " |"]
        lines += ["|---|" + "---:|" * len(RATIO_METRICS)]
        for policy, against in ratios.items():
            for baseline, row in against.items():
                cells = " | ".join(fmt_ci(row[k], 1.0, 3) for k in RATIO_METRICS)
                lines.append(f"| {policy} / {baseline} | {cells} |")
    return [*lines, ""]

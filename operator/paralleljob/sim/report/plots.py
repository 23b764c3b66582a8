"""PNG plots of one or several runs, side by side: JCT CDF, GPU allocation and fragmentation over time.

matplotlib is imported here only (it is in the ``sim`` extra) and always with the Agg backend, so plotting
works without a display and never touches a GUI toolkit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # the backend must be chosen before pyplot is imported
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from paralleljob.sim.run.engine import SimResult

SECONDS_PER_DAY = 86_400.0
FILES = {"jct_cdf": "jct_cdf.png", "allocation": "allocation.png", "fragmentation": "fragmentation.png"}


# Distinct line styles and widths, so a policy whose curve coincides with another's stays visible.
STYLES = (("-", 2.6), ("--", 1.8), (":", 1.8), ("-.", 1.4), ((0, (1, 3)), 1.4))


def plot_all(
    results: Mapping[str, SimResult], out_dir: Path, by_seed: Mapping[int, Mapping[str, SimResult]] | None = None
) -> dict[str, str]:
    """Write the plots; returns {plot name: file name}. With several seeds, also the ratio bars."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _jct_cdf(results, out_dir / FILES["jct_cdf"])
    _over_time(results, "allocation", "GPUs allocated (%)", out_dir / FILES["allocation"])
    _over_time(results, "fragmentation", "free GPUs stranded on partly used nodes (% of all)",
               out_dir / FILES["fragmentation"])  # fmt: skip
    files = dict(FILES)
    if by_seed:
        files["ratios"] = "ratios.png"
        _ratios(by_seed, out_dir / files["ratios"])
    return files


def _ratios(by_seed: Mapping[int, Mapping[str, SimResult]], path: Path) -> None:
    """Grouped bars: each policy's metric over the first baseline's, per seed then averaged, 95% intervals."""
    from paralleljob.sim.report.compare import BASELINES, LABELS, RATIO_METRICS, summarize

    doc = summarize({s: {p: r.metrics for p, r in runs.items()} for s, runs in by_seed.items()})
    policies = list(next(iter(by_seed.values())))
    baseline = next((b for b in BASELINES if b in policies), policies[0])
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(1, len(policies))
    for i, policy in enumerate(policies):
        row = doc["ratios"].get(policy, {}).get(baseline)
        means = [1.0 if row is None else (row[k]["mean"] or 0.0) for k in RATIO_METRICS]
        errs = [0.0 if row is None else (row[k]["ci95"] or 0.0) for k in RATIO_METRICS]
        xs = [k + i * width for k in range(len(RATIO_METRICS))]
        ax.bar(xs, means, width, yerr=errs, capsize=3, label=policy)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([k + width * (len(policies) - 1) / 2 for k in range(len(RATIO_METRICS))])
    ax.set_xticklabels([LABELS[k][0] for k in RATIO_METRICS], rotation=15, fontsize=8)
    ax.set_ylabel(f"ratio to {baseline}")
    _finish(fig, ax, f"ratio to {baseline} over {len(by_seed)} seeds", path)


def _jct_cdf(results: Mapping[str, SimResult], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (name, result), (style, lw) in zip(results.items(), itertools.cycle(STYLES), strict=False):
        # Zero-length jobs have no place on a log axis.
        jcts = sorted(
            j.finished - j.trace.submit_s
            for j in result.jobs
            if j.finished is not None and j.finished > j.trace.submit_s
        )
        if not jcts:
            continue
        ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
        ax.step([x / 3600.0 for x in jcts], ys, where="post", label=name, ls=style, lw=lw)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of completed jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(True, which="both", alpha=0.3)
    _finish(fig, ax, "JCT CDF", path)


def percent_axis_top(peak_pct: float) -> float:
    """The top of a 0..top percent axis that shows a curve peaking at ``peak_pct``: 100 once the curve
    reaches half of it, else the next 1-2-5 step above the peak plus a sixth. A fixed 0-100 axis drew a
    replay peaking at 0.9% (the Alibaba trace on its own 6,212 GPUs) as a flat line on the floor."""
    if peak_pct >= 50.0:
        return 100.0
    want = max(peak_pct * 1.15, 0.1)
    step = 10.0 ** math.floor(math.log10(want))
    return next(m * step for m in (1.0, 2.0, 5.0, 10.0) if m * step >= want)


def _over_time(results: Mapping[str, SimResult], field: str, ylabel: str, path: Path) -> float:
    """Plot ``field`` (a share of all GPUs) in percent over time; returns the y axis' top."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    peak = 0.0
    for (name, result), (style, lw) in zip(results.items(), itertools.cycle(STYLES), strict=False):
        series = result.series
        values = [100.0 * v for v in getattr(series, field)]
        peak = max([peak, *values])
        ax.plot([t / SECONDS_PER_DAY for t in series.time_s], values, label=name, ls=style, lw=lw)
    top = percent_axis_top(peak)
    ax.set_xlabel("simulated time (days)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, top)
    ax.grid(True, alpha=0.3)
    # the axis no longer always ends at 100: say so where a reader looks first
    _finish(fig, ax, ylabel if top == 100.0 else f"{ylabel}; axis to {top:g}%, peak {peak:.2g}%", path)
    return top


def _finish(fig: Figure, ax: Axes, title: str, path: Path) -> None:
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""PNG plots of one or several runs, side by side: JCT CDF, GPU allocation and fragmentation over time.

matplotlib is imported here only (it is in the ``sim`` extra) and always with the Agg backend, so plotting
works without a display and never touches a GUI toolkit.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # the backend must be chosen before pyplot is imported
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from paralleljob.sim.engine import SimResult

SECONDS_PER_DAY = 86_400.0
FILES = {"jct_cdf": "jct_cdf.png", "allocation": "allocation.png", "fragmentation": "fragmentation.png"}


def plot_all(results: Mapping[str, SimResult], out_dir: Path) -> dict[str, str]:
    """Write the three plots; returns {plot name: file name}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _jct_cdf(results, out_dir / FILES["jct_cdf"])
    _over_time(results, "allocation", "GPUs allocated (%)", out_dir / FILES["allocation"])
    _over_time(results, "fragmentation", "free GPUs on partly used nodes (%)", out_dir / FILES["fragmentation"])
    return dict(FILES)


def _jct_cdf(results: Mapping[str, SimResult], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, result in results.items():
        # Zero-length jobs have no place on a log axis.
        jcts = sorted(
            j.finished - j.trace.submit_s
            for j in result.jobs
            if j.finished is not None and j.finished > j.trace.submit_s
        )
        if not jcts:
            continue
        ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
        ax.step([x / 3600.0 for x in jcts], ys, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of completed jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(True, which="both", alpha=0.3)
    _finish(fig, ax, "JCT CDF", path)


def _over_time(results: Mapping[str, SimResult], field: str, ylabel: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, result in results.items():
        series = result.series
        values = getattr(series, field)
        ax.plot([t / SECONDS_PER_DAY for t in series.time_s], [100.0 * v for v in values], label=name, lw=1.2)
    ax.set_xlabel("simulated time (days)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    _finish(fig, ax, ylabel, path)


def _finish(fig: Figure, ax: Axes, title: str, path: Path) -> None:
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

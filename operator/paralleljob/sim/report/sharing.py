"""Issue 44's comparison as Markdown tables: whole GPUs vs MIG slices vs MPS shares on the Alibaba 2023 pods.

``python -m paralleljob.sim.report.evidence sharing --seeds N [--speedups 1,4] [--sharing-nodes 16]``: for
each seed, a sample of the trace's nodes drawn with that seed (as ``--node-sample``/``--cluster-seed``
do); every pod replayed in each mode by ``sim.run.sharing`` (see there for what is measured); mean ± 95%
half-width over seeds, and ratios to the whole-GPU mode taken per seed. ``mps-spread`` is MPS placed on the
node with the most free GPUs instead of the packing rule.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from paralleljob.sim.cluster.clusters import node_list_cluster
from paralleljob.sim.report.compare import fmt_ci, mean_ci
from paralleljob.sim.run.sharing import SharingRun, simulate
from paralleljob.sim.workload.alibaba import read_pod_shares

VARIANTS = (("whole", "whole", "packed"), ("mig", "mig", "packed"), ("mps", "mps", "packed"),
            ("mps-spread", "mps", "spread"))  # fmt: skip


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _p95(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else _mean(values)


ROWS = (
    ("compute allocation (%)", lambda r: r.compute_allocation * 100, 1),
    ("held allocation (%)", lambda r: r.held_allocation * 100, 1),
    ("GPUs in use (%)", lambda r: r.gpus_in_use * 100, 1),
    ("compute asked per GPU in use", lambda r: r.compute_allocation / r.gpus_in_use, 3),
    ("fractional pods: mean wait (h)", lambda r: _mean(r.small_wait_s) / 3600, 2),
    ("fractional pods: p95 wait (h)", lambda r: _p95(r.small_wait_s) / 3600, 2),
    ("8-GPU pods: mean wait (h)", lambda r: _mean(r.whole_node_wait_s) / 3600, 1),
    ("8-GPU pods: p95 wait (h)", lambda r: _p95(r.whole_node_wait_s) / 3600, 1),
    ("whole free 8-GPU nodes, mean", lambda r: r.whole_free_nodes, 2),
    ("share of time with no whole free 8-GPU node (%)", lambda r: r.no_whole_free_node * 100, 1),
    ("pods not started", lambda r: float(r.not_started), 1),
)


def sharing_table(
    traces: Path, seeds: Sequence[int], speedup: float, nodes: int, variants: Sequence[tuple[str, str, str]] = VARIANTS
) -> str:
    pods = read_pod_shares(traces / "alibaba2023_openb_pods.csv")
    runs: dict[int, dict[str, SharingRun]] = {}
    gpus = []
    for seed in seeds:
        topology = node_list_cluster(traces / "alibaba2023_openb_gpu_nodes.csv", nodes, seed)
        gpus.append(sum(topology.node_gpu_count))
        runs[seed] = {name: simulate(topology, pods, mode, placement=how, speedup=speedup)
                      for name, mode, how in variants}  # fmt: skip
    names = [name for name, _, _ in variants]
    lines = [f"{nodes} nodes ({min(gpus)}-{max(gpus)} GPUs), arrivals x{speedup:g}, seeds {list(seeds)}", "",
             "| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]  # fmt: skip
    for label, read, digits in ROWS:
        cells = [fmt_ci(mean_ci([read(by[n]) for by in runs.values()]), 1.0, digits) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for label, read in (("compute allocation / whole", ROWS[0][1]), ("8-GPU mean wait / whole", ROWS[6][1])):
        cells = []
        for n in names:
            ratios = [read(by[n]) / read(by["whole"]) for by in runs.values() if read(by["whole"]) > 0]
            cells.append(fmt_ci(mean_ci(ratios), 1.0, 3) if ratios else "n/a (no wait)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

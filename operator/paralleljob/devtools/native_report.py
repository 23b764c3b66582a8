"""What ``paralleljob bench native`` concludes from its runs, and the table it prints (the one in
docs/benchmarks.md): placement quality from the runs alone (the same state for both schedulers), throughput and
refusals from the runs under contention. Pure: the measured dicts in, a dict and Markdown out."""

from __future__ import annotations

import statistics
from typing import Any

from paralleljob.core import JobSpec
from paralleljob.devtools.native_set import Gang, step_ms

HEADER = (
    "| nodes | gangs placed, contention: kube-scheduler / ours | half-bound | apply -> bound median, contention"
    " | pods/s: kube-scheduler / ours (ratio) | mean comm ms, alone: kube-scheduler / ours (saving)"
    " | seed / Megatron gangs: saving | mean step ms, alone | ours costlier on |"
)


def _saving(ks: float | None, ours: float | None) -> float | None:
    return round((1 - ours / ks) * 100, 1) if ks and ours is not None else None


def compare(gangs: list[Gang], runs: dict[str, dict[str, Any]], specs: dict[str, JobSpec]) -> dict[str, Any]:
    ks, ours = runs["kube_scheduler_alone"], runs["ours_alone"]
    both = [g.name for g in gangs if g.name in ks["costs_ms"] and g.name in ours["costs_ms"]]
    costlier = [n for n in both if ours["costs_ms"][n] > ks["costs_ms"][n] * (1 + 1e-6)]

    def mean(run: dict[str, Any], names: list[str], step: bool = False) -> float | None:
        values = [step_ms(specs[n], run["costs_ms"][n]) if step else run["costs_ms"][n] for n in names]
        return round(statistics.mean(values), 3) if values else None

    by_model = {}
    for model in sorted({g.cost_model for g in gangs}):
        names = [g.name for g in gangs if g.cost_model == model and g.name in both]
        by_model[model] = _saving(mean(ks, names), mean(ours, names))
    ks_c, ours_c = runs["kube_scheduler"], runs["ours"]
    return {
        "alone_placed_by_both": len(both),
        "alone_ours_costlier_on": costlier,
        "alone_kube_scheduler_placed_we_did_not": sorted(set(ks["costs_ms"]) - set(ours["costs_ms"])),
        "alone_we_placed_kube_scheduler_did_not": sorted(set(ours["costs_ms"]) - set(ks["costs_ms"])),
        "alone_mean_comm_ms_on_common": {"kube_scheduler": mean(ks, both), "ours": mean(ours, both)},
        "alone_comm_saving_pct": _saving(mean(ks, both), mean(ours, both)),
        "alone_comm_saving_pct_by_cost_model": by_model,
        "alone_mean_step_ms_on_common": {"kube_scheduler": mean(ks, both, True), "ours": mean(ours, both, True)},
        "contention_kube_scheduler_placed_we_did_not": sorted(set(ks_c["placed_names"]) - set(ours_c["placed_names"])),
        "pods_per_second_ratio": (
            round(ours_c["pods_per_second"] / ks_c["pods_per_second"], 2)
            if ours_c["pods_per_second"] and ks_c["pods_per_second"]
            else None
        ),
    }


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.1f}{unit}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def table(measured: dict[str, Any]) -> str:
    """One row per cluster size, as docs/benchmarks.md shows it."""
    lines = [HEADER, "|" + "---|" * 9]
    for size in measured["sizes"]:
        ks, ours, cmp = size["kube_scheduler"], size["ours"], size["compare"]
        comm, step = cmp["alone_mean_comm_ms_on_common"], cmp["alone_mean_step_ms_on_common"]
        models = cmp["alone_comm_saving_pct_by_cost_model"]
        step_saving = _saving(step["kube_scheduler"], step["ours"])
        costlier = cmp["alone_ours_costlier_on"]
        ratio = cmp["pods_per_second_ratio"]
        cells = [
            f"{size['nodes']:,}",
            f"{ks['placed']} / {ours['placed']} of {ks['gangs']}",
            f"{len(ks['half_bound'])} / {len(ours['half_bound'])}",
            f"{_num(ks['apply_to_bound_median_s'])} / {_num(ours['apply_to_bound_median_s'])} s",
            f"{_num(ks['pods_per_second'])} / {_num(ours['pods_per_second'])} (**{'-' if ratio is None else ratio}**)",
            f"{_num(comm['kube_scheduler'])} / {_num(comm['ours'])} (**{_pct(cmp['alone_comm_saving_pct'])}**)",
            f"{_pct(models.get('seed'))} / {_pct(models.get('megatron'))}",
            f"{_num(step['kube_scheduler'])} / {_num(step['ours'])} ({_pct(step_saving)})",
            f"{', '.join(costlier) if costlier else 'none'} of {cmp['alone_placed_by_both']}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

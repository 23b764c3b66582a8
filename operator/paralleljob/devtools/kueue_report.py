"""What ``paralleljob bench kueue`` concludes from its runs, and the table it prints: per gang, each Kueue
variant's placement (required rack, preferred rack) and ours, scored on the same state. Pure: the measured
dicts in, a dict and Markdown out."""

from __future__ import annotations

import statistics
from typing import Any

from paralleljob.devtools.native_set import Gang

# The runs, in the table's order: Kueue TAS with podset-required-topology on the rack, with
# podset-preferred-topology on the rack, and ParallelJobs of the same shapes.
RUNS = ("kueue_required", "kueue_preferred", "ours")
Run = dict[str, dict[str, Any]]  # gang name -> {placed, comm_ms, step_ms, apply_to_bound_s, nodes}


def _median_bound(run: Run) -> float | None:
    times = [r["apply_to_bound_s"] for r in run.values() if r["placed"]]
    return round(statistics.median(times), 3) if times else None


def pairwise(gangs: list[Gang], kueue: Run, ours: Run) -> dict[str, Any]:
    """One Kueue variant against us: means over the gangs both placed, and where either did better."""
    both = [g.name for g in gangs if kueue[g.name]["placed"] and ours[g.name]["placed"]]

    def mean(run: Run, key: str) -> float | None:
        return round(statistics.mean(run[n][key] for n in both), 3) if both else None

    return {
        "placed": {"kueue": sum(r["placed"] for r in kueue.values()), "ours": sum(r["placed"] for r in ours.values())},
        "placed_by_both": len(both),
        "ours_costlier_on": [n for n in both if ours[n]["comm_ms"] > kueue[n]["comm_ms"] * (1 + 1e-6)],
        "ours_cheaper_on": [n for n in both if ours[n]["comm_ms"] < kueue[n]["comm_ms"] * (1 - 1e-6)],
        "kueue_placed_we_did_not": [g.name for g in gangs if kueue[g.name]["placed"] and not ours[g.name]["placed"]],
        "we_placed_kueue_did_not": [g.name for g in gangs if ours[g.name]["placed"] and not kueue[g.name]["placed"]],
        "mean_comm_ms_on_common": {"kueue": mean(kueue, "comm_ms"), "ours": mean(ours, "comm_ms")},
        "mean_step_ms_on_common": {"kueue": mean(kueue, "step_ms"), "ours": mean(ours, "step_ms")},
        "median_apply_to_bound_s": {"kueue": _median_bound(kueue), "ours": _median_bound(ours)},
    }


def compare(gangs: list[Gang], runs: dict[str, Run]) -> dict[str, Any]:
    return {variant: pairwise(gangs, runs[variant], runs["ours"]) for variant in RUNS if variant != "ours"}


def _cell(row: dict[str, Any]) -> str:
    if not row["placed"]:
        return "not placed"
    return f"{row['comm_ms']:,.3f}, {row['step_ms']:,.1f}, {row['apply_to_bound_s']:.1f}"


def table(measured: dict[str, Any]) -> str:
    """One row per gang: comm ms, step ms and apply -> bound s under each run."""
    lines = [
        "| gang | shape | GPUs | cost model | Kueue TAS, required rack | Kueue TAS, preferred rack | ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for gang in measured["gangs"]:
        name = gang["name"]
        cells = " | ".join(_cell(measured[run][name]) for run in RUNS)
        lines.append(f"| {name} | {gang['shape']} | {gang['gpus']} | {gang['cost_model']} | {cells} |")
    return "\n".join(lines)

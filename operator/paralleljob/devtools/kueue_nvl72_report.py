"""What ``paralleljob bench kueue --kueue-nvl72 RACKS`` concludes, and the table it prints: per gang, each
Kueue variant's placement over the trays of GB200 NVL72 racks (required clique, preferred clique, preferred
clique with each TP group a required-clique slice) and ours, scored on the same state. Pure: the measured
dicts in, a dict and Markdown out."""

from __future__ import annotations

from typing import Any

from paralleljob.devtools.kueue_report import Run, pairwise
from paralleljob.devtools.native_set import Gang

RUNS = ("kueue_required", "kueue_preferred", "kueue_sliced", "ours")
HEADERS = ("Kueue, required clique", "Kueue, preferred clique", "Kueue, preferred + TP-group slices", "ours")


def clique_counts(gangs: list[Gang], run: Run) -> dict[str, int]:
    """Over the gangs the run placed: TP groups, those inside one clique, those on trays of their own."""
    placed = [run[g.name] for g in gangs if run[g.name]["placed"]]
    return {
        key: sum(r[key] for r in placed) for key in ("tp_groups", "tp_groups_in_one_clique", "tp_groups_on_own_trays")
    }


def compare(gangs: list[Gang], runs: dict[str, Run]) -> dict[str, Any]:
    """Each Kueue variant against us (``kueue_report.pairwise``: placed, cheaper or dearer, means on the
    gangs both placed, apply -> bound), plus how each run kept the TP groups of gangs spanning trays (TP8)
    inside one clique."""
    spanning = [g for g in gangs if g.tp > 4]
    out: dict[str, Any] = {v: pairwise(gangs, runs[v], runs["ours"]) for v in RUNS if v != "ours"}
    out["tp_groups_over_trays"] = {v: clique_counts(spanning, runs[v]) for v in RUNS}
    return out


def _cell(row: dict[str, Any]) -> str:
    if not row["placed"]:
        return "not placed"
    inside = f"{row['tp_groups_in_one_clique']}/{row['tp_groups']}"
    return (
        f"{row['comm_ms']:,.3f}, {row['step_ms']:,.1f}, {row['apply_to_bound_s']:.1f}, {inside} in 1, {row['cliques']}"
    )


def table(measured: dict[str, Any]) -> str:
    """One row per gang; a cell: comm ms, step ms, apply -> bound s, TP groups inside one clique, cliques used."""
    lines = [
        f"| gang | shape | GPUs (trays) | cost model | {' | '.join(HEADERS)} |",
        "|---|---|---|---|" + "---|" * len(RUNS),
    ]
    for gang in measured["gangs"]:
        name = gang["name"]
        cells = " | ".join(_cell(measured[run][name]) for run in RUNS)
        lines.append(
            f"| {name} | {gang['shape']} | {gang['gpus']} ({gang['gpus'] // 4}) | {gang['cost_model']} | {cells} |"
        )
    return "\n".join(lines)

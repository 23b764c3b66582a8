"""What a run leaves in ``--out``: metrics.json, timeseries.json, one jobs-<policy>.csv per policy, and
report.md, a Markdown report with the policies side by side and the plots.

Every file is a function of the results alone (no wall-clock times, no absolute paths), so the same seed
gives the same bytes.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paralleljob.sim.report.compare import PB, markdown_summary
from paralleljob.sim.run.engine import SimResult
from paralleljob.sim.run.metrics import rounded


def dump_json(value: Any) -> str:
    return json.dumps(rounded(value), sort_keys=True, indent=2) + "\n"


def metrics_document(header: Mapping[str, Any], results: Mapping[str, SimResult]) -> dict[str, Any]:
    return {**header, "policies": {name: result.metrics for name, result in results.items()}}


def write_outputs(
    out_dir: Path, header: Mapping[str, Any], results: Mapping[str, SimResult], plots: Mapping[str, str] | None
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "metrics.json").write_text(dump_json(metrics_document(header, results)))
    series = {name: result.series.as_dict() for name, result in results.items()}
    (out_dir / "timeseries.json").write_text(dump_json(series))
    for name, result in results.items():
        _write_jobs(out_dir / f"jobs-{name}.csv", result)
    (out_dir / "report.md").write_text(markdown_report(header, results, plots))


def _write_jobs(path: Path, result: SimResult) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(
            ["job_id", "tenant", "gpus", "tp", "pp", "dp", "submit_s", "start_s", "finish_s", "jct_s",
             "comm_cost_ms", "slowdown", "tp_groups_across_nodes", "restarts", "lost_work_s", "rejected"]
        )
        for job in result.jobs:
            spec, t = job.spec, job.trace
            jct = job.finished - t.submit_s if job.finished is not None else None
            writer.writerow(
                [job.job_id, t.tenant, spec.num_gpus, spec.tp, spec.pp, spec.dp, _num(t.submit_s),
                 _num(job.first_start), _num(job.finished), _num(jct), _num(job.first_cost_ms),
                 _num(job.first_slowdown), job.tp_groups_split, job.restarts, _num(job.lost_work_s),
                 job.rejected_reason]
            )


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


ROWS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # (label, unit, path into metrics, format)
    ("jobs completed", "", ("jobs", "completed"), "{:d}"),
    ("jobs unfinished at the end", "", ("jobs", "unfinished"), "{:d}"),
    ("jobs rejected (can never fit)", "", ("jobs", "rejected"), "{:d}"),
    ("mean JCT", "h", ("jct_s", "mean"), "hours"),
    ("p50 JCT", "h", ("jct_s", "p50"), "hours"),
    ("p99 JCT", "h", ("jct_s", "p99"), "hours"),
    ("makespan", "h", ("makespan_s",), "hours"),
    ("mean queueing delay", "h", ("queueing_delay_s", "mean"), "hours"),
    ("p99 queueing delay", "h", ("queueing_delay_s", "p99"), "hours"),
    ("GPU allocation over the busy period", "%", ("gpu_allocation_busy_period",), "percent"),
    ("GPU allocation over the whole run", "%", ("gpu_allocation",), "percent"),
    ("mean fragmentation", "%", ("fragmentation_mean",), "percent"),
    ("comm. cost per multi-GPU job, mean", "ms", ("comm_cost_ms_multi_gpu_jobs", "mean"), "{:.1f}"),
    ("comm. cost per multi-GPU job, p99", "ms", ("comm_cost_ms_multi_gpu_jobs", "p99"), "{:.1f}"),
    ("slowdown of multi-GPU jobs, mean", "x", ("slowdown_multi_gpu_jobs", "mean"), "{:.3f}"),
    ("TP groups across nodes", "", ("tp_groups_across_nodes",), "{:d}"),
    ("jobs with a TP group across nodes", "", ("jobs_with_tp_groups_across_nodes",), "{:d}"),
    ("failures injected", "", ("failures", "injected"), "{:d}"),
    ("jobs interrupted by failures", "", ("failures", "jobs_interrupted"), "{:d}"),
    ("goodput lost to failures", "GPU-h", ("goodput_lost", "total_gpu_hours"), "{:.1f}"),
)
# Rows of what only some runs do (moves back, elastic resizes): shown when some policy of the run reports them.
OPTIONAL_ROWS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("moves back to a cheaper placement", "", ("migrations_back",), "{:d}"),
    ("GPUs held idle by moves back", "GPU-h", ("migrations_back_gpu_hours",), "{:.1f}"),
    ("elastic grows", "", ("elastic_grows",), "{:d}"),
    ("elastic shrinks (for a higher-priority job)", "", ("elastic_shrinks",), "{:d}"),
    ("elastic drops (a replica lost to a failure)", "", ("elastic_drops",), "{:d}"),
    ("GPUs held idle by grows and shrinks", "GPU-h", ("elastic_resize_gpu_hours",), "{:.1f}"),
)


def _cell(metrics: Mapping[str, Any], path: tuple[str, ...], fmt: str) -> str:
    value: Any = metrics
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    if value is None:
        return "n/a"
    if fmt == "hours":
        return f"{value / 3600.0:.2f}"
    if fmt == "percent":
        return f"{100.0 * value:.1f}"
    return fmt.format(value)


def markdown_table(results: Mapping[str, SimResult]) -> str:
    names = list(results)
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    optional = [row for row in OPTIONAL_ROWS if any(row[2][0] in results[name].metrics for name in names)]
    for label, unit, path, fmt in (*ROWS, *optional):
        cells = [_cell(results[name].metrics, path, fmt) for name in names]
        lines.append(f"| {label}{f' ({unit})' if unit else ''} | " + " | ".join(cells) + " |")
    levels = list(results[names[0]].metrics.get("bytes_by_level", {})) if names else []
    for i, level in enumerate(levels):
        cells = [f"{results[name].metrics['bytes_by_level'][level] * PB:.3f}" for name in names]
        lines.append(f"| {'within' if i == 0 else 'over'} {level} (PB) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


QUOTA_ROWS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("mean JCT (h)", ("jct_s", "mean"), "hours"),
    ("p99 JCT (h)", ("jct_s", "p99"), "hours"),
    ("mean queueing delay (h)", ("queueing_delay_s", "mean"), "hours"),
    ("p99 queueing delay (h)", ("queueing_delay_s", "p99"), "hours"),
    ("makespan (h)", ("makespan_s",), "hours"),
    ("GPU allocation over the busy period (%)", ("gpu_allocation_busy_period",), "percent"),
    ("ETTR", ("ettr",), "{:.3f}"),
    ("preemptions", ("jobs", "preempted"), "{:d}"),
    ("Jain's index over tenants (mean over passes)", ("fairness_jain_mean",), "{:.3f}"),
)


def quota_comparison(results: Mapping[str, SimResult], without: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """``--compare-quotas``: each policy with the quotas and without them, on the same seed and jobs."""
    names = [name for name in results if name in (without or {})]
    if not without or not names:
        return []
    head = "| metric | " + " | ".join(f"{n} with quotas | {n} without" for n in names) + " |"
    lines = ["## With and without quotas (same seed, same jobs)", "", head, "|---|" + "---:|" * (2 * len(names))]
    for label, path, fmt in QUOTA_ROWS:
        cells = [c for n in names for c in (_cell(results[n].metrics, path, fmt), _cell(without[n], path, fmt))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def tenant_tables(results: Mapping[str, SimResult], without: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """Per policy, one row per tenant: jobs, quota, share of the allocated GPU-hours, peak GPUs, GPU-hours
    borrowed above the guarantee, mean / p99 queueing; with ``without`` (``--compare-quotas``) the same
    tenant's figures from the run without quotas on the same seed, side by side."""
    lines: list[str] = []
    for name, result in results.items():
        tenants: Mapping[str, Any] = result.metrics.get("tenants", {})
        if len(tenants) < 2 and not any("quota" in row for row in tenants.values()):
            continue  # one tenant and no quota: the main table says it all
        other: Mapping[str, Any] = (without or {}).get(name, {}).get("tenants", {})
        head = "| tenant | jobs | guaranteed / max GPUs | guaranteed (%) | GPU-h share (%) | peak GPUs | borrowed GPU-h"
        head += " | preemptions | mean queueing (h) | p99 queueing (h) |"
        if other:
            head += " without quotas: GPU-h share (%) | peak GPUs | mean queueing (h) | p99 queueing (h) |"
        lines += [f"### Tenants: {name}", "", head, "|---|" + "---:|" * (head.count("|") - 2)]
        for tenant, row in tenants.items():
            quota = row.get("quota")
            cells = [
                tenant,
                str(row["jobs"]),
                f"{quota['guaranteed_gpus']} / {'none' if quota['max_gpus'] is None else quota['max_gpus']}"
                if quota
                else "-",
                _cell(row, ("quota", "guaranteed_share"), "percent") if quota else "-",
                *_tenant_cells(row),
            ]
            cells.insert(6, _cell(row, ("quota", "borrowed_gpu_hours"), "{:.1f}") if quota else "-")
            cells.insert(7, _cell(row, ("preemptions",), "{:d}"))
            if other:
                cells += _tenant_cells(other.get(tenant, {}))
            lines.append("| " + " | ".join(cells) + " |")
        jain = [_cell(result.metrics, ("fairness_jain_mean",), "{:.3f}")]
        if without and name in without:
            jain.append(f"{_cell(without[name], ('fairness_jain_mean',), '{:.3f}')} without quotas")
        jain_line = f"Jain's index over the tenants' dominant shares, mean over scheduling passes: {'; '.join(jain)}."
        lines += ["", jain_line, ""]
    if lines:
        lines = [
            "## Tenants",
            "",
            "Share of all allocated GPU-hours, the most GPUs held at once, GPU-hours held above the guarantee (the"
            " only ones another tenant may reclaim by preemption) and the queueing delay of each tenant's jobs.",
            "",
            *lines,
        ]
    return lines


def _tenant_cells(row: Mapping[str, Any]) -> list[str]:
    return [
        _cell(row, ("gpu_share",), "percent"),
        _cell(row, ("peak_gpus",), "{:d}"),
        _cell(row, ("queueing_delay_s", "mean"), "hours"),
        _cell(row, ("queueing_delay_s", "p99"), "hours"),
    ]


def rejection_note(results: Mapping[str, SimResult]) -> list[str]:
    """Say so when policies' JCTs are over different job sets (a job one policy rejects is in no JCT)."""
    rejected = {name: r.metrics["jobs"]["rejected"] for name, r in results.items()}
    if not any(rejected.values()):
        return []
    counts = ", ".join(f"{name} {count}" for name, count in rejected.items())
    return [
        f"**Rejected jobs are not in the JCT figures** ({counts} rejected because they can never fit); where the"
        " counts differ, the policies' JCTs are over different sets of jobs.",
        "",
    ]


def markdown_report(
    header: Mapping[str, Any], results: Mapping[str, SimResult], plots: Mapping[str, str] | None
) -> str:
    cluster, trace, config = header["cluster"], header["trace"], header["config"]
    parts = [
        "# Simulation report",
        "",
        f"Trace `{trace['file'] or 'none'}` ({trace['format']}, {trace['jobs']} jobs);"
        f" cluster of {cluster['nodes']} nodes /"
        f" {cluster['gpus']} GPUs (levels: {', '.join(cluster['levels'])}); seed {config['seed']};"
        f" cost model `{config['cost_model']}`; failures {config['failure_rate_per_1000_node_days']} per 1000"
        f" node-days; queue `{config['queue']}`, quotas `{config.get('quotas', 'none')}`.",
        "",
        "## Policies",
        "",
        *(f"- **{name}**: {result.metrics['policy_description']}" for name, result in results.items()),
        "",
        "## Results",
        "",
        markdown_table(results),
        "",
        *rejection_note(results),
        *quota_comparison(results, header.get("without_quotas")),
        *tenant_tables(results, header.get("without_quotas")),
    ]
    if "summary" in header:
        parts += markdown_summary(header, header["seeds"])
    if plots:
        parts += ["## Plots", ""]
        titles = {
            "jct_cdf": "JCT CDF", "allocation": "GPU allocation over time", "fragmentation": "Fragmentation",
            "ratios": "Ratios to the first baseline, over seeds (95% intervals)",
        }  # fmt: skip
        for key, file in plots.items():
            parts += [f"### {titles.get(key, key)}", "", f"![{titles.get(key, key)}]({file})", ""]
    parts += [
        "## Definitions",
        "",
        "JCT = finish - submit (completed jobs). Queueing delay = first start - submit. Makespan = last finish"
        " - first submit. GPU allocation is time-weighted, over the busy period (first to last submit, the same"
        " window for every policy) and over the whole run. Fragmentation = free GPUs stranded on nodes with some"
        " GPU allocated / all GPUs (sampled). n/a: no job to measure. Communication cost = the cost model's"
        " price per step of each multi-GPU job's first placement (what the placer minimises);"
        " slowdown = how much its communication, timed by the calibrated collective model, stretches the job"
        " (docs/simulator.md). Goodput lost = GPU-hours of work"
        " since the last checkpoint thrown away by failures, plus GPU-hours spent restarting after them (an"
        " elastic drop included); GPUs held idle by a move back or an elastic grow or shrink are counted in"
        " their own rows, since no failure caused them. PB within/over a"
        " level = petabytes (1e15) the jobs' steps moved through that level: each TP group's, pipeline pair's"
        " and DP ring's bytes per step (the cost model's volumes) charged to the lowest level holding all its"
        " members, times the steps run on that placement (lost work included).",
        "",
    ]
    return "\n".join(parts)

"""What ``paralleljob bench kueue --kueue-parts ceiling,throughput`` concludes from its runs: each drain's
rate as a share of the API server's own ceiling (pods created and bound per second by a raw client), the
controllers' CPU and memory side by side, and the Markdown table docs/benchmarks.md shows. Pure: the
measured dicts in, dicts and text out.
"""

from __future__ import annotations

import statistics
from typing import Any

# The drains, in the table's order: Kueue admitting Indexed Jobs that kube-scheduler binds, and ParallelJobs.
DRAINS = ("kueue", "ours")
# The repair's sides: Kueue's JobSet with the Job's default back-off, the same restarting the whole JobSet
# on a lost pod (JobSet's PyTorch shape), and ParallelJobs.
REPAIR_SIDES = ("kueue", "kueue-whole-restart", "ours")


def rate(count: int, seconds: float) -> float:
    """``count`` per second over ``seconds`` (0 when nothing was timed)."""
    return round(count / seconds, 2) if seconds > 0 else 0.0


def share(value: float, ceiling: float) -> float | None:
    """``value`` as a share of ``ceiling``; None when there is no ceiling to divide by."""
    return round(value / ceiling, 3) if ceiling > 0 else None


def capacity_floor_s(jobs: list[tuple[int, int, int, float]], gpus: int) -> float:
    """The shortest drain the cluster's GPUs allow whatever the scheduler: every job's GPU-seconds
    (TP x DP x run) spread over all GPUs, and never less than the longest run."""
    if not jobs:
        return 0.0
    busy = sum(tp * dp * run_s for tp, dp, _, run_s in jobs)
    return round(max(busy / gpus, max(run_s for *_, run_s in jobs)), 1)


def cpu_and_rss(before: dict[str, float], after: dict[str, float], peak_rss_mb: dict[str, float]) -> dict[str, Any]:
    """Per process: CPU seconds spent between the two reads and the largest RSS sampled meanwhile."""
    return {
        name: {
            "cpu_s": round(after.get(name, 0.0) - before[name], 1),
            "peak_rss_mb": round(peak_rss_mb.get(name, 0), 1),
        }
        for name in sorted(before)
    }


def against_ceiling(ceiling: dict[str, Any], drains: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each drain's pods bound per second (pods over first create -> last Succeeded) as a share of the
    create + bind ceiling and of the create + bind + status one. A drain stopped at its time limit counts
    what finished by then; the ratio of two drains is a lower bound when only the slower one was stopped,
    and not given when the faster one was."""
    out: dict[str, Any] = {}
    for who, drain in drains.items():
        pods_per_s = rate(drain.get("finished_pods", drain["pods"]), drain["drain_s"])
        out[who] = {
            "pods_per_s": pods_per_s,
            "jobs_per_s": rate(drain.get("finished_jobs", drain["jobs"]), drain["drain_s"]),
            "capacity_floor_over_drain": share(drain.get("capacity_floor_s", 0.0), drain["drain_s"]),
            "share_of_create_bind": share(pods_per_s, ceiling["create_bind"]["pods_per_s"]),
            "share_of_create_bind_status": share(pods_per_s, ceiling["create_bind_status"]["pods_per_s"]),
        }
    if "kueue" in drains and "ours" in drains:
        kueue, ours = drains["kueue"], drains["ours"]
        ratio = share(kueue["drain_s"], ours["drain_s"])
        if not kueue.get("stopped_at_limit") and not ours.get("stopped_at_limit"):
            out["ours_over_kueue"] = ratio
        elif kueue.get("stopped_at_limit") and not ours.get("stopped_at_limit"):
            out["ours_over_kueue_at_least"] = ratio
        elif ours.get("stopped_at_limit") and not kueue.get("stopped_at_limit"):
            out["ours_over_kueue_at_most"] = ratio
    return out


def median_or_none(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 2) if samples else None


def table(measured: dict[str, Any]) -> str:
    """The ceiling's rows, then one row per drain: drain time, rates, shares, requests, CPU and RSS."""
    ceiling = measured["ceiling"]
    lines = [
        "| run | jobs | pods | seconds | pods/s | share of create+bind | share of create+bind+status"
        " | API requests / job | CPU s (controller, kube-scheduler) | peak RSS MB (controller, kube-scheduler) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for part in ("create_bind", "create_bind_status"):
        row = ceiling[part]
        label = part.replace("_", " + ")
        lines.append(f"| ceiling: raw {label} | - | {row['pods']} | {row['seconds']} | {row['pods_per_s']} | | | | | |")
    shares = measured.get("against_ceiling", {})
    for who in DRAINS:
        if who not in measured.get("drains", {}):
            continue
        drain, ratio = measured["drains"][who], shares[who]
        procs = drain["processes"]
        controller = procs.get("kueue-controller-manager" if who == "kueue" else "operator", {})
        scheduler = procs.get("kube-scheduler", {})
        cpu = f"{controller.get('cpu_s', '-')}, {scheduler.get('cpu_s', '-')}"
        rss = f"{controller.get('peak_rss_mb', '-')}, {scheduler.get('peak_rss_mb', '-')}"
        requests = drain.get("requests_per_job", {}).get("all", "-")
        lines.append(
            f"| {who} | {_count(drain, 'jobs')} | {_count(drain, 'pods')} | {drain['drain_s']} | {ratio['pods_per_s']}"
            f" | {ratio['share_of_create_bind']} | {ratio['share_of_create_bind_status']}"
            f" | {requests} | {cpu} | {rss} |"
        )
    return "\n".join(lines)


def _count(drain: dict[str, Any], what: str) -> str:
    """All of them, or "finished of all" for a drain stopped at its time limit."""
    if drain.get("stopped_at_limit"):
        return f"{drain['finished_' + what]} of {drain[what]} (stopped)"
    return str(drain[what])


def repair_table(repair: dict[str, Any]) -> str:
    """One row per side of the repair part: samples repaired, medians, and the placement cost before and
    after of the first sample that was repaired."""
    lines = [
        "| side | repaired | median whole again s | median pods restarted | comm ms before -> after |",
        "|---|---|---|---|---|",
    ]
    for who in REPAIR_SIDES:
        if who not in repair:
            continue
        side = repair[who]
        done = [r for r in side["samples"] if r.get("whole_again_s") is not None]
        cost = f"{done[0].get('comm_ms_before')} -> {done[0].get('comm_ms_after')}" if done else "-"
        medians = f"{side['median_whole_again_s']} | {side['median_pods_restarted']}"
        lines.append(f"| {who} | {side['repaired']} | {medians} | {cost} |")
    return "\n".join(lines)

"""What ``paralleljob bench kueue --kueue-parts ceiling,throughput`` concludes from its runs: each drain's
rate as a share of the API server's own ceiling (pods created and bound per second by a raw client), the
controllers' CPU and memory side by side, the Markdown table docs/benchmarks.md shows, and a drain's
progress series cut into windows (rate, CPU per process, the operator's passes, the API server's latency).
Pure: the measured dicts and ``/metrics`` texts in, dicts and text out.
"""

from __future__ import annotations

import itertools
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
    create + bind ceiling, of the create + bind + status one, and (when measured) of whole pod lives. A
    drain stopped at its time limit counts what finished by then; the ratio of two drains is a lower bound
    when only the slower one was stopped, and not given when the faster one was."""
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
        if "lifecycle" in ceiling:  # runs before it was measured have none
            out[who]["share_of_lifecycle"] = share(pods_per_s, ceiling["lifecycle"]["pods_per_s"])
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


CEILING_ROWS = (
    ("create_bind", "raw create + bind"),
    ("create_bind_status", "raw create + bind + status"),
    ("lifecycle", "whole pod lives (create + bind, kwok runs and ends each)"),
    ("create_bind_spec", "create + bind of pods with only what the SPEC names a worker carries"),
    ("create_bind_worker", "create + bind of pods the size of the operator's workers"),
)


def table(measured: dict[str, Any]) -> str:
    """The ceiling's rows, then one row per drain: drain time, rates, shares, requests, CPU and RSS."""
    ceiling = measured["ceiling"]
    lines = [
        "| run | jobs | pods | seconds | pods/s | share of create+bind | share of create+bind+status"
        " | share of whole pod lives | API requests / job | CPU s (controller, kube-scheduler)"
        " | peak RSS MB (controller, kube-scheduler) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for part, label in CEILING_ROWS:
        if part in ceiling:
            row = ceiling[part]
            lines.append(
                f"| ceiling: {label} | - | {row['pods']} | {row['seconds']} | {row['pods_per_s']} | | | | | | |"
            )
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
            f" | {ratio.get('share_of_lifecycle', '-')} | {requests} | {cpu} | {rss} |"
        )
    return "\n".join(lines)


def _count(drain: dict[str, Any], what: str) -> str:
    """All of them, or "finished of all" for a drain stopped at its time limit."""
    if drain.get("stopped_at_limit"):
        return f"{drain['finished_' + what]} of {drain[what]} (stopped)"
    return str(drain[what])


def repair_table(repair: dict[str, Any]) -> str:
    """One row per side of the repair part, on the idle cluster and (when measured) in a wave of gangs:
    samples repaired, medians, the placement cost before and after of the first sample that was repaired,
    and for the wave its pods bound at the failure, when the gang was whole again and in all (medians)."""
    lines = [
        "| side | cluster | repaired | median whole again s | median pods restarted | comm ms before -> after"
        " | wave pods bound: at failure / when whole / all (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    wave = repair.get("in_wave") or {}
    for who in REPAIR_SIDES:
        rows = [("idle", repair[who])] if who in repair else []
        if who in wave:
            rows.append((f"wave of {wave['gangs']} x {wave['pods_per_gang']}", wave[who]))
        for where, side in rows:
            done = [r for r in side["samples"] if r.get("whole_again_s") is not None]
            cost = f"{done[0].get('comm_ms_before')} -> {done[0].get('comm_ms_after')}" if done else "-"
            medians = f"{side['median_whole_again_s']} | {side['median_pods_restarted']}"
            lines.append(f"| {who} | {where} | {side['repaired']} | {medians} | {cost} | {wave_cell(side)} |")
    return "\n".join(lines)


def wave_cell(side: dict[str, Any]) -> str:
    samples = [r for r in side["samples"] if "wave_pods_bound" in r]
    if not samples:
        return "-"
    at = median_or_none([r["wave_pods_bound_at_failure"] for r in samples])
    when = median_or_none([r["wave_pods_bound_when_whole"] for r in samples])
    bound = median_or_none([r["wave_pods_bound"] for r in samples])
    return f"{at} / {when} / {bound} ({median_or_none([r['wave_bound_s'] for r in samples])})"


# ---- a drain's progress series: where the rate went and who used the CPU, window by window ----------------

OPERATOR_SUMS = {  # what a progress point keeps of the operator's /metrics: sums over every series of each
    "passes": "paralleljob_reconcile_pass_duration_seconds_count",
    "pass_s": "paralleljob_reconcile_pass_duration_seconds_sum",
    "lists": "paralleljob_list_duration_seconds_count",
    "list_s": "paralleljob_list_duration_seconds_sum",
    "gc_s": "paralleljob_gc_full_collection_seconds_sum",
    "requests": "paralleljob_api_requests_total",
    "urgent_waiting": 'paralleljob_api_requests_waiting{lane="urgent"}',
    "background_waiting": 'paralleljob_api_requests_waiting{lane="background"}',
    "held_back": "paralleljob_status_writes_held_back",
}
# Columns of the printed series: the processes whose CPU is shown, in this order, and the API server's verbs
# whose mean latency is.
CPU_COLUMNS = ("operator", "kube-apiserver", "etcd", "kwok", "kube-controller-manager", "kueue-controller-manager")
VERBS = ("POST", "PATCH", "PUT", "LIST")


def metric_sum(text: str, series: str) -> float:
    """The sum of every sample of ``series`` in a ``/metrics`` text: a bare name matches every label set, a
    name with ``{label="value"}`` only the series carrying that label."""
    name, _, label = series.partition("{")
    wanted = label.rstrip("}")
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name) : len(name) + 1] not in ("{", " "):
            continue
        head, _, value = line.rpartition(" ")
        if wanted and wanted not in head:
            continue
        try:
            total += float(value)
        except ValueError:
            continue
    return total


def operator_point(text: str) -> dict[str, float]:
    """The operator's share of a progress point, from one read of its ``/metrics``."""
    return {key: round(metric_sum(text, series), 3) for key, series in OPERATOR_SUMS.items()}


def apiserver_point(text: str) -> dict[str, Any]:
    """The API server's share of a progress point: requests served, each verb's request count and seconds
    (``apiserver_request_duration_seconds``: watches not in it), watchers open and watch events sent (also
    by resource), and per API Priority and Fairness level the requests dispatched and the seconds they
    waited in its queues (``apiserver_flowcontrol_request_wait_duration_seconds``)."""
    by_verb = _count_and_sum_by(text, "apiserver_request_duration_seconds", "verb")
    watch_events: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_watch_events_total{"):
            resource = _label(line, "resource") or _label(line, "kind")
            watch_events[resource] = watch_events.get(resource, 0.0) + float(line.rpartition(" ")[2])
    return {
        "requests": metric_sum(text, "apiserver_request_total"),
        "by_verb": by_verb,
        "watchers": metric_sum(text, 'apiserver_longrunning_requests{verb="WATCH"}'),
        "watch_events": metric_sum(text, "apiserver_watch_events_total"),
        "watch_events_by_resource": dict(sorted(watch_events.items())),
        "flow_wait": _count_and_sum_by(text, "apiserver_flowcontrol_request_wait_duration_seconds", "priority_level"),
    }


def _label(line: str, name: str) -> str:
    marker = f'{name}="'
    return line.split(marker, 1)[1].split('"', 1)[0] if marker in line else ""


def _count_and_sum_by(text: str, histogram: str, label: str) -> dict[str, list[float]]:
    """A histogram's ``_count`` and ``_sum`` added up per value of ``label``: {value: [count, sum]}."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, slot in (("_count{", 0), ("_sum{", 1)):
            if line.startswith(histogram + suffix):
                counts = out.setdefault(_label(line, label), [0.0, 0.0])
                counts[slot] += float(line.rpartition(" ")[2])
    return {key: [round(n, 3), round(s, 3)] for key, (n, s) in sorted(out.items())}


def windows(points: list[dict[str, Any]], step: int = 1) -> list[dict[str, Any]]:
    """The series' cumulative points as windows of ``step`` sampling intervals (the last point always ends
    one): jobs finished and their rate, each process's CPU in cores, the operator's passes and their mean,
    its requests and lists, and the API server's requests and mean latency by verb."""
    if len(points) < 2:
        return []
    marks = points[::step]
    if marks[-1] is not points[-1]:
        marks.append(points[-1])
    out = []
    for a, b in itertools.pairwise(marks):
        span = b["t"] - a["t"]
        if span <= 0:
            continue
        row: dict[str, Any] = {
            "from_s": round(a["t"]),
            "to_s": round(b["t"]),
            "done": b["done"],
            "jobs_per_s": rate(b["done"] - a["done"], span),
            "created": b["created"],
            "waiting": b.get("waiting"),
            "cores": {n: round((b["cpu_s"][n] - a["cpu_s"].get(n, 0.0)) / span, 2) for n in b["cpu_s"]},
            "operator_rss_mb": round(b.get("rss_mb", {}).get("operator", 0.0)),
        }
        op_a, op_b = a.get("operator") or {}, b.get("operator") or {}
        if op_a and op_b:
            passes = op_b["passes"] - op_a["passes"]
            row["passes"] = round(passes)
            row["pass_ms"] = round((op_b["pass_s"] - op_a["pass_s"]) / passes * 1e3) if passes > 0 else None
            row["operator_requests_per_s"] = rate(round(op_b["requests"] - op_a["requests"]), span)
            row["lists"] = round(op_b["lists"] - op_a["lists"])
            row["list_s"] = round(op_b["list_s"] - op_a["list_s"], 1)
            row["gc_s"] = round(op_b["gc_s"] - op_a["gc_s"], 1)
        api_a, api_b = a.get("apiserver") or {}, b.get("apiserver") or {}
        if api_a and api_b:
            row["api_requests_per_s"] = rate(round(api_b["requests"] - api_a["requests"]), span)
            latency = {}
            for verb, (n_b, s_b) in api_b["by_verb"].items():
                n_a, s_a = api_a["by_verb"].get(verb, [0.0, 0.0])
                if n_b > n_a:
                    latency[verb] = round((s_b - s_a) / (n_b - n_a) * 1e3, 1)
            row["api_ms"] = latency
            row["watch_events_per_s"] = rate(round(api_b["watch_events"] - api_a["watch_events"]), span)
        out.append(row)
    return out


def progress_table(points: list[dict[str, Any]], step: int = 1) -> str:
    """The windows as a Markdown table, one line each."""
    cpu = [n for n in CPU_COLUMNS if points and n in points[-1]["cpu_s"]]
    lines = [
        "| s | done | jobs/s | waiting | passes, mean ms | CPU cores (" + ", ".join(cpu) + ") | operator RSS MB"
        " | operator req/s, lists (s) | API req/s | API mean ms (" + ", ".join(VERBS) + ") |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in windows(points, step):
        cores = ", ".join(f"{row['cores'].get(n, 0.0):.2f}" for n in cpu)
        passes = f"{row['passes']}, {row['pass_ms']}" if "passes" in row else "-"
        requests = f"{row['operator_requests_per_s']}, {row['lists']} ({row['list_s']})" if "passes" in row else "-"
        latency = ", ".join(str(row.get("api_ms", {}).get(v, "-")) for v in VERBS) if "api_ms" in row else "-"
        lines.append(
            f"| {row['from_s']}-{row['to_s']} | {row['done']} | {row['jobs_per_s']} | {row['waiting']} | {passes}"
            f" | {cores} | {row['operator_rss_mb']} | {requests} | {row.get('api_requests_per_s', '-')} | {latency} |"
        )
    return "\n".join(lines)

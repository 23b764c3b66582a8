"""``paralleljob bench scale``: the operator at cluster sizes a platform team runs (the scale issue's table).

Per size, on a fresh dev cluster of that many kwok nodes (8 GPUs each), with the operator as a separate
process:

- quiet pass: pass durations from the operator's own ``paralleljob_reconcile_pass_duration_seconds``
  histogram over a window in which only one node changes (cordoned, uncordoned), five times a second:
  mean, and p50/max as the histogram's bucket bounds;
- CPU per minute over that window and RSS of the operator process, read from ``/proc``;
- idle CPU per minute as a real cluster is idle: every node re-reporting its status once per 5 minutes
  (heartbeat times only, sent by the benchmark since kwok sends none), with the passes that caused;
- a 128-pod gang (TP8 x PP8 x DP16, 1,024 GPUs) apply -> all bound, and 20 jobs of 4 pods at once;
- the 256-pod stream against kube-scheduler (default limits and qps 5000) on the same API server, taken from
  the operator benchmark (``bench.bench_throughput``);
- failover: a standby started beside the leader, the leader SIGKILLed; the time from the standby reporting
  leadership to its first pass (the lease wait itself is the lease's duration, set by the user).
Times are medians of the repeats; the JSON keeps every sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devtools.bench_kit import PodTracker, delete_jobs, job_body
from paralleljob.devtools.bench_operator import bench_throughput
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path

PASS_METRIC = "paralleljob_reconcile_pass_duration_seconds"


def operator_under_test(cluster: DevCluster, workdir: Path, identity: str) -> OperatorProcess:
    """The operator as the benchmarks run it: its own defaults (lease, resync), warnings only, one log."""
    operator = OperatorProcess(
        cluster.kubeconfig, workdir, identity=identity, log_level="WARNING", log_name="{identity}.log"
    )
    operator.start()
    return operator


def buckets(operator: OperatorProcess) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of the operator's pass-duration histogram."""
    try:
        text = operator.metrics()
    except OSError:
        return []
    pattern = rf'^{PASS_METRIC}_bucket{{le="([^"]+)"}} ([0-9.e+-]+)$'
    return [(float(le), float(n)) for le, n in re.findall(pattern, text, re.MULTILINE)]


def _quantile_bound(before: list[tuple[float, float]], after: list[tuple[float, float]], q: float) -> float:
    """The smallest bucket bound holding fraction ``q`` of the passes between two readings."""
    counts = [(le, n - dict(before).get(le, 0.0)) for le, n in after]
    total = counts[-1][1] if counts else 0.0
    for le, n in counts:
        if total and n >= q * total:
            return le
    return float("nan")


async def _tick(kube: Kube, node: str, seconds: float, every_s: float) -> None:
    """One node cordoned and uncordoned in turn every ``every_s``: each change wakes a pass in which one
    node changed and nothing else (the operator ignores writes that change nothing it reads, such as an
    annotation, and kwok nodes send no status heartbeats, so a quiet cluster makes no passes at all)."""
    deadline = time.monotonic() + seconds
    cordoned = False
    try:
        while time.monotonic() < deadline:
            cordoned = not cordoned
            await kube.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": cordoned}})
            await asyncio.sleep(every_s)
    finally:
        await kube.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": False}})


async def idle_window(operator: OperatorProcess, kube: Kube, node: str, seconds: float) -> dict[str, Any]:
    count, total = f"{PASS_METRIC}_count", f"{PASS_METRIC}_sum"
    before = (buckets(operator), operator.sample(count), operator.sample(total), operator.cpu_seconds())
    await _tick(kube, node, seconds, 0.2)
    after = (buckets(operator), operator.sample(count), operator.sample(total), operator.cpu_seconds())
    passes = after[1] - before[1]
    return {
        "seconds": seconds,
        "passes": int(passes),
        "pass_mean_ms": round((after[2] - before[2]) / passes * 1e3, 2) if passes else None,
        "pass_p50_bucket_ms": _quantile_bound(before[0], after[0], 0.5) * 1e3,
        "pass_max_bucket_ms": _quantile_bound(before[0], after[0], 1.0) * 1e3,
        "cpu_s_per_minute": round((after[3] - before[3]) * 60 / seconds, 2),
        "rss_mb": round(operator.rss_mb(), 1),
    }


async def heartbeat_window(
    operator: OperatorProcess, kube: Kube, names: list[str], seconds: float, report_every_s: float = 300.0
) -> dict[str, Any]:
    """An idle cluster as a real one is idle: every node's kubelet re-reports its status every
    ``report_every_s`` (kubelet's nodeStatusReportFrequency, 5 min, since heartbeats moved to Leases), so
    ``nodes / 300`` Node updates a second that change only heartbeat times. kwok sends none, so the
    benchmark sends them, spread evenly; the operator should parse each and pass on none."""
    count = f"{PASS_METRIC}_count"
    passes, cpu = operator.sample(count), operator.cpu_seconds()
    rate = len(names) / report_every_s
    started = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate) + 1
        beats = []
        while sent < due:
            name = names[sent % len(names)]
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            body = {"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": stamp}]}}
            beats.append(
                kube.request(
                    "PATCH", f"/api/v1/nodes/{name}/status", body, content_type="application/strategic-merge-patch+json"
                )
            )
            sent += 1
        await asyncio.gather(*beats)
        await asyncio.sleep(0.05)
    return {
        "seconds": seconds,
        "node_updates": sent,
        "updates_per_second": round(rate, 1),
        "passes": int(operator.sample(count) - passes),
        "cpu_s_per_minute": round((operator.cpu_seconds() - cpu) * 60 / seconds, 2),
    }


async def gang_apply_to_bound(kube: Kube, namespace: str, shape: tuple[int, int, int], repeats: int) -> list[float]:
    tp, pp, dp = shape
    samples = []
    async with PodTracker(kube, namespace) as tracker:
        for i in range(repeats):
            name = f"gang-{i}"
            started = time.monotonic()
            await kube.request("POST", job_path(namespace), job_body(name, tp, pp, dp))
            await tracker.wait(lambda name=name: len(tracker.bound(name)) == pp * dp, 300)  # type: ignore[misc]
            samples.append(max(tracker.bound_at[u] for u in tracker.bound(name)) - started)
            await delete_jobs(kube, namespace, tracker)
    return samples


async def many_at_once(kube: Kube, namespace: str, jobs: int, repeats: int) -> list[float]:
    samples = []
    async with PodTracker(kube, namespace) as tracker:
        for r in range(repeats):
            started = time.monotonic()
            names = [f"j{r}-{i}" for i in range(jobs)]
            await asyncio.gather(*(kube.request("POST", job_path(namespace), job_body(n, 8, 2, 2)) for n in names))
            await tracker.wait(lambda: len(tracker.bound()) == jobs * 4, 300)
            samples.append(max(tracker.bound_at[u] for u in tracker.bound()) - started)
            await delete_jobs(kube, namespace, tracker)
    return samples


async def failover(cluster: DevCluster, workdir: Path, leader: OperatorProcess) -> dict[str, float]:
    standby = operator_under_test(cluster, workdir, "bench-standby")
    try:
        await asyncio.sleep(5.0)  # the standby lists and watches while it waits for the lease
        passes = standby.sample("paralleljob_reconcile_passes_total")  # a standby does not pass; be sure
        leader.kill()
        led_at = await standby.wait_metric("paralleljob_leader", 1.0)
        first_pass_at = await standby.wait_metric("paralleljob_reconcile_passes_total", passes + 1)
        return {"leader_to_first_pass_s": round(first_pass_at - led_at, 3), "rss_mb": round(standby.rss_mb(), 1)}
    finally:
        standby.stop()


def _median(samples: list[float]) -> dict[str, Any]:
    return {"samples_s": [round(s, 3) for s in samples], "median_s": round(statistics.median(samples), 3)}


async def measure_size(cluster: DevCluster, nodes: int, args: Any) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-scale-"))
    operator = operator_under_test(cluster, workdir, "bench-leader")
    kube = await Kube.connect(str(cluster.kubeconfig))
    out: dict[str, Any] = {"nodes": nodes, "gpus": nodes * 8}
    repeats = max(1, min(args.repeat, 3))
    try:
        for ns in ("scale-gang", "scale-many", "bench-stream", "bench-plain"):
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        first = await operator.wait_metric("paralleljob_reconcile_passes_total", 1.0)
        out["start_to_first_pass_s"] = round(first - operator.started_at, 2)
        await asyncio.sleep(5.0)  # start-up rebuilds and re-lists settle
        out["idle"] = await idle_window(operator, kube, cluster.shape.node_name(0), args.idle_seconds)
        print(f"{nodes} nodes idle: {out['idle']}", file=sys.stderr, flush=True)
        out["heartbeats"] = await heartbeat_window(operator, kube, cluster.shape.names(), args.idle_seconds)
        print(f"{nodes} nodes heartbeats: {out['heartbeats']}", file=sys.stderr, flush=True)
        if nodes * 8 >= 1024:
            out["gang_128_pods"] = _median(await gang_apply_to_bound(kube, "scale-gang", (8, 8, 16), repeats))
        out["jobs_20_at_once"] = _median(await many_at_once(kube, "scale-many", 20, repeats))
        print(f"{nodes} nodes gangs: {out.get('gang_128_pods')} {out['jobs_20_at_once']}", file=sys.stderr)
        if not args.no_kube_scheduler:
            out["stream_256"] = await bench_throughput(
                kube, cluster.kubeconfig, 32, 8, args.rounds, workdir, with_kube_scheduler=True
            )
        out["rss_mb_after"] = round(operator.rss_mb(), 1)
        out["failover"] = await failover(cluster, workdir, operator)
        print(f"{nodes} nodes: {out}", file=sys.stderr, flush=True)
    finally:
        await kube.close()
        operator.stop()
    return out


def run_scale(sizes: list[int], args: Any) -> dict[str, Any]:
    from paralleljob.devcluster.cluster import down, up
    from paralleljob.devcluster.nodes import NodeShape

    results = []
    for nodes in sizes:
        name = f"scale-{os.getpid()}-{nodes}"
        cluster = up(name, NodeShape(count=nodes, gpus_per_node=8, nodes_per_rack=32), die_with_caller=True)
        try:
            results.append(asyncio.run(measure_size(cluster, nodes, args)))
        finally:
            down(name)
    return {"sizes": results}

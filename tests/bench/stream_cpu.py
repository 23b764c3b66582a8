"""Who uses the machine's CPU while a 256-pod stream is bound: the operator, or kube-scheduler, and the
control plane beside them (the scale issue's binder part: is the binder short of CPU of its own, or is the
machine full?).

    python -m tests.bench.stream_cpu [--nodes 64] [--rounds 3] [--apiserver-profiles DIR]

A dev cluster, the operator as its own process. Each round: the operator's stream (32 jobs of 8 pods, as
``devtools.bench_operator.bench_stream``); then kube-scheduler with qps 5000 binding 256 plain pods (as
``devtools.bench_operator.plain_round``), and 256 copies of one of the operator's workers (same labels,
annotations, env and requests: the same pods). For each, from the first create to the last pod bound:
seconds; CPU seconds (user + system, from /proc) of the binder (operator or kube-scheduler), kube-apiserver, etcd, kwok,
kube-controller-manager and this process (which creates the plain pods and watches them); and the requests
the API server served meanwhile, from its own metrics. Cores x seconds is what the machine had. With
``--apiserver-profiles``, kube-apiserver's own CPU profile (``/debug/pprof/profile``, 3 s from the first
create) of every round is saved there as ``<binder>-<round>.pprof`` (read with ``go tool pprof -top``).
Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from paralleljob.devcluster import state
from paralleljob.devcluster.cluster import DevCluster, down, up
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devtools.bench_kit import PodTracker, delete_jobs, job_body
from paralleljob.devtools.bench_operator import plain_pod, same_pod
from paralleljob.devtools.bench_scale import operator_under_test
from paralleljob.devtools.kubescheduler import ensure_kube_scheduler, start_kube_scheduler
from paralleljob.devtools.operatorproc import process_cpu_seconds
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, pod_path


def control_plane(name: str) -> dict[str, int]:
    record = state.load(name)
    assert record is not None
    return {p.name: p.pid for p in record.processes}


def api_requests(kubeconfig: Path) -> collections.Counter[str]:
    """The API server's own count of requests served, by verb and resource (its /metrics)."""
    text = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", "/metrics"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout  # fmt: skip
    counts: collections.Counter[str] = collections.Counter()
    for match in re.finditer(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$", text, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if labels.get("verb") == "WATCH":
            continue
        sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
        key = f"{labels.get('verb')} {labels.get('resource')}{sub}"
        counts[key] += int(float(match.group(2)))
    return counts


class Meter:
    """CPU seconds of each process since :meth:`start`, read at :meth:`read` (the moment the last pod bound),
    and the requests the API server served meanwhile."""

    def __init__(self, pids: dict[str, int], kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.requests_before = api_requests(kubeconfig)
        self.requests: dict[str, int] = {}
        self.pids = pids
        self.before = {k: process_cpu_seconds(p) for k, p in pids.items()}
        self.started = time.monotonic()
        self.used: dict[str, float] = {}
        self.wall = 0.0

    def read(self) -> None:
        self.wall = time.monotonic() - self.started
        self.used = {k: round(process_cpu_seconds(p) - self.before[k], 2) for k, p in self.pids.items()}
        after = api_requests(self.kubeconfig)
        before = self.requests_before
        self.requests = {k: n - before[k] for k, n in sorted(after.items()) if n > before[k]}

    def result(self, binder: str) -> dict[str, Any]:
        total = round(sum(self.used.values()), 2)
        return {"binder": binder, "bound_s": round(self.wall, 3), "cpu_s": self.used, "total_cpu_s": total,
                "requests": self.requests}  # fmt: skip


class ApiServerProfile:
    """kube-apiserver's CPU profile over the next ``seconds`` (its pprof endpoint, through kubectl)."""

    def __init__(self, kubeconfig: Path, out: Path | None, seconds: int = 3) -> None:
        self.kubeconfig, self.out, self.seconds = kubeconfig, out, seconds
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        if self.out is None:
            return
        self.proc = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", str(self.kubeconfig), "get", "--raw",
            f"/debug/pprof/profile?seconds={self.seconds}",
            stdout=self.out.open("wb"), stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    async def finish(self) -> None:
        if self.proc is not None:
            await self.proc.wait()


async def ours(kube: Kube, meter: Meter, profiling: ApiServerProfile) -> dict[str, Any]:
    """The operator benchmark's stream (32 jobs x 8 pods applied at once), metered up to the last bind.
    Returns one of its pods as a template for kube-scheduler's "same pods" round."""
    async with PodTracker(kube, "bench-stream") as tracker:
        meter.started = time.monotonic()
        await asyncio.gather(
            *(kube.request("POST", job_path("bench-stream"), job_body(f"s{i}", 1, 2, 4)) for i in range(32))
        )
        await tracker.wait(lambda: len(tracker.bound()) == 256, 300)
        meter.read()
        await profiling.finish()  # the clean-up is not part of the profile
        sample = await kube.request("GET", pod_path("bench-stream", "s0-d0-p0"))
        await delete_jobs(kube, "bench-stream", tracker)
    return same_pod(sample)


async def theirs(kube: Kube, meter: Meter, profiling: ApiServerProfile, template: dict[str, Any] | None = None) -> None:
    """256 pods (plain ones, or copies of ``template``) created at once for kube-scheduler, metered up to
    the last bind."""

    def pod(i: int) -> dict[str, Any]:
        if template is None:
            return plain_pod(f"p{i}")
        return {**template, "metadata": {**template["metadata"], "name": f"p{i}"}}

    async with PodTracker(kube, "bench-plain") as tracker:
        meter.started = time.monotonic()
        await asyncio.gather(*(kube.request("POST", pod_path("bench-plain"), pod(i)) for i in range(256)))
        await tracker.wait(lambda: len(tracker.bound()) == 256, 300)
        meter.read()
        await profiling.finish()
        await kube.request(
            "DELETE", pod_path("bench-plain"), query={"labelSelector": "bench=plain"}, body={"gracePeriodSeconds": 0}
        )
        await tracker.wait(lambda: not tracker.pods, 120)


async def main_async(cluster: DevCluster, name: str, rounds: int, profiles: Path | None) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-stream-cpu-"))
    operator = operator_under_test(cluster, workdir, "stream-cpu")
    kube = await Kube.connect(str(cluster.kubeconfig))
    binary = ensure_kube_scheduler(print)
    plane = control_plane(name)
    results = []
    try:
        for ns in ("bench-stream", "bench-plain"):
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        await operator.wait_leader_async(600.0, 0.05)
        await asyncio.sleep(3.0)
        for round_ in range(rounds):

            def profile(binder: str, round_: int = round_) -> ApiServerProfile:
                out = profiles / f"{binder}-{round_}.pprof" if profiles is not None else None
                return ApiServerProfile(cluster.kubeconfig, out)

            meter = Meter({**plane, "binder": operator.proc.pid, "bench": os.getpid()}, cluster.kubeconfig)
            profiling = profile("operator")
            await profiling.start()
            template = await ours(kube, meter, profiling)
            results.append(meter.result("operator"))
            print(results[-1], flush=True)
            await asyncio.sleep(2.0)
            proc = start_kube_scheduler(binary, cluster.kubeconfig, workdir, 5000.0, 5000)
            try:
                await asyncio.sleep(2.0)
                for binder, pods in (("kube-scheduler", None), ("kube-scheduler-same-pods", template)):
                    meter = Meter({**plane, "binder": proc.pid, "bench": os.getpid()}, cluster.kubeconfig)
                    profiling = profile(binder)
                    await profiling.start()
                    await theirs(kube, meter, profiling, pods)
                    results.append(meter.result(binder))
                    print(results[-1], flush=True)
                    await asyncio.sleep(2.0)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
            await asyncio.sleep(2.0)
    finally:
        await kube.close()
        operator.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--apiserver-profiles", type=Path, help="save kube-apiserver's CPU profile of each round here")
    args = parser.parse_args()
    if args.nodes * 8 < 256:
        parser.error(f"--nodes {args.nodes}: the 256 one-GPU pods of a stream need at least 32 nodes of 8 GPUs")
    name = "stream-cpu"
    cluster = up(name, NodeShape(count=args.nodes, gpus_per_node=8, nodes_per_rack=8), die_with_caller=True)
    try:
        if args.apiserver_profiles is not None:
            args.apiserver_profiles.mkdir(parents=True, exist_ok=True)
        results = asyncio.run(main_async(cluster, name, args.rounds, args.apiserver_profiles))
    finally:
        down(name)
    for binder in ("operator", "kube-scheduler", "kube-scheduler-same-pods"):
        rows = [r for r in results if r["binder"] == binder]
        keys = rows[0]["cpu_s"].keys()
        medians = {k: statistics.median(r["cpu_s"][k] for r in rows) for k in keys}
        wall = statistics.median(r["bound_s"] for r in rows)
        total = statistics.median(r["total_cpu_s"] for r in rows)
        print(f"{binder}: bound in {wall:.2f} s (median); CPU-s per round {medians}; all {total:.2f} of "
              f"{(os.cpu_count() or 1) * wall:.2f} available")  # fmt: skip


if __name__ == "__main__":
    main()

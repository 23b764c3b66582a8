"""Who uses the machine's CPU while a 256-pod stream is bound: the operator, or kube-scheduler, and the
control plane beside them (the scale issue's binder part: is the binder short of CPU of its own, or is the
machine full?).

    python -m tests.bench.stream_cpu [--nodes 64] [--rounds 3]

A dev cluster, the operator as its own process; rounds alternate between the operator's stream (32 jobs of
8 pods, ``bench.bench_stream``) and kube-scheduler with qps 5000 binding 256 plain pods
(``bench.plain_round``). For each round: wall seconds, and CPU seconds (user + system, from /proc) of every
process that matters: the binder (operator or kube-scheduler), kube-apiserver, etcd, kwok,
kube-controller-manager, and this process (which creates the plain pods and watches them). The machine's
capacity over the round is cores x wall; what is left shows whether a second binder process could run.
Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from paralleljob.devcluster import state
from paralleljob.devcluster.cluster import DevCluster, down, up
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.k8s.api import ApiError, Kube
from paralleljob.k8s.bench import bench_stream, plain_round
from paralleljob.k8s.bench_scale import OperatorUnderTest
from paralleljob.k8s.kubescheduler import ensure_kube_scheduler, start_kube_scheduler

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def control_plane(name: str) -> dict[str, int]:
    record = state.load(name)
    assert record is not None
    return {p.name: p.pid for p in record.processes}


async def measured(pids: dict[str, int], run: Callable[[], Awaitable[float]]) -> dict[str, Any]:
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    started = time.monotonic()
    seconds = await run()
    wall = time.monotonic() - started
    used = {k: round(cpu_seconds(p) - before[k], 2) for k, p in pids.items()}
    total = round(sum(used.values()), 2)
    return {"bound_s": round(seconds, 3), "wall_s": round(wall, 3), "cpu_s": used, "total_cpu_s": total}


async def main_async(cluster: DevCluster, name: str, rounds: int) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-stream-cpu-"))
    operator = OperatorUnderTest(cluster, workdir, "stream-cpu")
    kube = await Kube.connect(str(cluster.kubeconfig))
    binary = ensure_kube_scheduler(print)
    plane = control_plane(name)
    results = []
    try:
        for ns in ("bench-stream", "bench-plain"):
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        await operator.wait("paralleljob_leader", 1.0)
        await asyncio.sleep(3.0)
        for _ in range(rounds):
            pids = {**plane, "binder": operator.proc.pid, "bench": os.getpid()}

            async def ours() -> float:
                return float((await bench_stream(kube, "bench-stream", 32, 8))["seconds"])

            results.append({"binder": "operator", **await measured(pids, ours)})
            print(results[-1], flush=True)
            proc = start_kube_scheduler(binary, cluster.kubeconfig, workdir, 5000.0, 5000)
            try:
                await asyncio.sleep(2.0)
                pids = {**plane, "binder": proc.pid, "bench": os.getpid()}
                results.append(
                    {"binder": "kube-scheduler", **await measured(pids, lambda: plain_round(kube, "bench-plain", 256))}
                )
                print(results[-1], flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    finally:
        await kube.close()
        operator.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    name = "stream-cpu"
    cluster = up(name, NodeShape(count=args.nodes, gpus_per_node=8, nodes_per_rack=8), die_with_caller=True)
    try:
        results = asyncio.run(main_async(cluster, name, args.rounds))
    finally:
        down(name)
    for binder in ("operator", "kube-scheduler"):
        rows = [r for r in results if r["binder"] == binder]
        keys = rows[0]["cpu_s"].keys()
        medians = {k: statistics.median(r["cpu_s"][k] for r in rows) for k in keys}
        wall = statistics.median(r["bound_s"] for r in rows)
        total = statistics.median(r["total_cpu_s"] for r in rows)
        print(f"{binder}: bound in {wall:.2f} s (median); CPU-s per round {medians}; all {total:.2f} of "
              f"{(os.cpu_count() or 1) * wall:.2f} available")  # fmt: skip


if __name__ == "__main__":
    main()

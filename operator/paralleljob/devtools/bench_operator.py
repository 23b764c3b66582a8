"""``paralleljob bench-operator``: the operator's numbers on the local control plane (SPEC section 4).

1. apply -> bound: time from creating a 64-pod ParallelJob to all 64 pods bound (target <= 2 s);
2. throughput: a stream of jobs applied at once, pods bound per second, against kube-scheduler binding the
   same number of plain pods on the same API server in the same run (target ratio >= 1.0);
3. repair: time from a node turning NotReady (as seen by a watch) to its replacement pods bound (<= 2 s);
4. worker crash: time from a worker pod turning Failed to its replacement bound (``bench_crash``, p99 <= 2 s).
Times are taken by this process from its own watch of the API, the way a user would see them. The operator
runs as a separate process, as it would in a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devtools.bench_crash import bench_worker_crash
from paralleljob.devtools.bench_kit import (
    HGX_VICTIM,
    PodTracker,
    Victim,
    Wave,
    delete_jobs,
    job_body,
    start_operator,
)
from paralleljob.devtools.tracker import watch
from paralleljob.k8s.edge.config import DEFAULT_WRITE_CONCURRENCY
from paralleljob.k8s.edge.constants import GROUP
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, pod_path


async def bench_latency(kube: Kube, namespace: str, repeats: int) -> dict[str, Any]:
    samples = []
    async with PodTracker(kube, namespace) as tracker:
        for i in range(repeats):
            started = time.monotonic()
            await kube.request("POST", job_path(namespace), job_body(f"wide-{i}", 1, 8, 8))
            await tracker.wait(lambda i=i: len(tracker.bound(f"wide-{i}")) == 64)  # type: ignore[misc]
            samples.append(max(tracker.bound_at[u] for u in tracker.bound(f"wide-{i}")) - started)
            await delete_jobs(kube, namespace, tracker)
    return {
        "pods": 64,
        "samples_s": [round(s, 4) for s in samples],
        "median_s": round(statistics.median(samples), 4),
        "max_s": round(max(samples), 4),
    }


async def bench_stream(kube: Kube, namespace: str, jobs: int, pods_per_job: int) -> dict[str, Any]:
    async with PodTracker(kube, namespace) as tracker:
        total = jobs * pods_per_job
        started = time.monotonic()
        await asyncio.gather(
            *(
                kube.request("POST", job_path(namespace), job_body(f"s{i}", 1, 2, pods_per_job // 2))
                for i in range(jobs)
            )
        )
        await tracker.wait(lambda: len(tracker.bound()) == total, 300)
        elapsed = max(tracker.bound_at[u] for u in tracker.bound()) - started
        worker = await kube.request("GET", pod_path(namespace, "s0-d0-p0"))
        await delete_jobs(kube, namespace, tracker)
    return {
        "jobs": jobs,
        "pods": total,
        "seconds": round(elapsed, 4),
        "pods_per_second": round(total / elapsed, 1),
        "worker": same_pod(worker),
    }


def same_pod(worker: dict[str, Any]) -> dict[str, Any]:
    """One of the operator's workers as a pod for kube-scheduler to bind: the same env, requests and as many
    labels and annotations of the same sizes (what the API server stores and sends per pod), without node,
    scheduler or owner. The operator's keys are renamed (same length): a pod labelled as a worker of a
    ParallelJob that is gone is an orphan the operator deletes."""
    metadata = worker.get("metadata") or {}
    spec = {k: v for k, v in (worker.get("spec") or {}).items() if k not in ("nodeName", "schedulerName")}

    def renamed(items: dict[str, str]) -> dict[str, str]:
        return {k.replace(GROUP, "x" * len(GROUP)): v for k, v in items.items() if k != "app.kubernetes.io/managed-by"}

    labels = {**renamed(metadata.get("labels") or {}), "bench": "plain"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": labels, "annotations": renamed(metadata.get("annotations") or {})},
        "spec": spec,
    }


_ROUNDS = itertools.count()


def plain_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "plain"}},
        "spec": {"containers": [{"name": "c", "image": "bench:1"}]},
    }


async def plain_round(kube: Kube, namespace: str, pods: int, template: dict[str, Any] | None = None) -> float:
    """Create ``pods`` plain pods (or copies of ``template``) at once and time them until all are bound by
    kube-scheduler. Each round's pods have names of their own: kwok finishes a deleted pod by deleting it by
    name, and under load that late delete hit the next round's pod of the same name (seen at 2,000 nodes)."""
    prefix = f"p{next(_ROUNDS)}-"

    def pod(i: int) -> dict[str, Any]:
        if template is None:
            return plain_pod(f"{prefix}{i}")
        return {**template, "metadata": {**template["metadata"], "name": f"{prefix}{i}"}}

    async with PodTracker(kube, namespace) as tracker:
        started = time.monotonic()
        await asyncio.gather(*(kube.request("POST", pod_path(namespace), pod(i)) for i in range(pods)))
        await tracker.wait(lambda: len(tracker.bound()) == pods, 300)
        elapsed = max(tracker.bound_at[u] for u in tracker.bound()) - started
        await kube.request(
            "DELETE", pod_path(namespace), query={"labelSelector": "bench=plain"}, body={"gracePeriodSeconds": 0}
        )
        await tracker.wait(lambda: not tracker.pods, 120)
    return elapsed


def summary(pods: int, samples: list[float], **extra: Any) -> dict[str, Any]:
    best = statistics.median(samples)
    return {
        "pods": pods,
        **extra,
        "samples_s": [round(x, 3) for x in samples],
        "median_s": round(best, 4),
        "pods_per_second": round(pods / best, 1),
    }


async def bench_throughput(
    kube: Kube, kubeconfig: Path, jobs: int, pods_per_job: int, rounds: int, workdir: Path, with_kube_scheduler: bool
) -> dict[str, Any]:
    """Rounds alternate between the operator and kube-scheduler (default limits, then lifted), so that
    whatever else runs on the machine weighs on all of them alike."""
    from paralleljob.devtools.kubescheduler import ensure_kube_scheduler, start_kube_scheduler

    total = jobs * pods_per_job
    ours: list[float] = []
    theirs: dict[float, list[float]] = {50.0: [], 5000.0: []}
    same_pods: list[float] = []  # kube-scheduler (qps 5000) binding copies of our workers
    binary = ensure_kube_scheduler(lambda m: print(m, file=sys.stderr, flush=True)) if with_kube_scheduler else None
    for _ in range(rounds):
        stream = await bench_stream(kube, "bench-stream", jobs, pods_per_job)
        ours.append(stream["seconds"])
        if binary is None:
            continue
        for qps in theirs:
            proc = start_kube_scheduler(binary, kubeconfig, workdir, qps, int(max(100, qps)))
            try:
                await asyncio.sleep(2.0)  # informers sync
                theirs[qps].append(await plain_round(kube, "bench-plain", total))
                if qps == 5000.0:
                    same_pods.append(await plain_round(kube, "bench-plain", total, stream["worker"]))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    out: dict[str, Any] = {"operator": summary(total, ours, jobs=jobs)}
    if binary is not None:
        out["kube_scheduler_default"] = summary(total, theirs[50.0], qps=50, burst=100)
        out["kube_scheduler_unthrottled"] = summary(total, theirs[5000.0], qps=5000, burst=5000)
        rate = out["operator"]["pods_per_second"]
        out["ratio_vs_default"] = round(rate / out["kube_scheduler_default"]["pods_per_second"], 2)
        out["ratio_vs_unthrottled"] = round(rate / out["kube_scheduler_unthrottled"]["pods_per_second"], 2)
        out["kube_scheduler_same_pods"] = summary(total, same_pods, qps=5000, burst=5000)
        out["ratio_vs_same_pods"] = round(rate / out["kube_scheduler_same_pods"]["pods_per_second"], 2)
    return out


async def bench_repair(
    kube: Kube, namespace: str, repeats: int, wave: Wave | None = None, first: int = 0, victim: Victim = HGX_VICTIM
) -> dict[str, Any]:
    """The ``victim`` job's first node (by default: a TP4 x PP2 x DP2 job's on HGX nodes) turned NotReady
    ``repeats`` times (healed between), from the NotReady seen by a watch to the replacement pods bound; with
    ``wave``, each failure 1 s into that wave of new gangs (its pods bound at the failure, when the job was
    whole again and the wave's own time are kept per sample; ``first``: the number of the first sample, which
    names its wave's gangs). ``moves``: per sample, the failed node and the nodes its replacements went to."""
    from paralleljob.devcluster.chaos import heal_node, make_node_not_ready, wait_node_ready

    samples: list[float] = []
    moves: list[dict[str, Any]] = []
    waves: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        tracker = await stack.enter_async_context(PodTracker(kube, namespace))
        wave_tracker = await stack.enter_async_context(PodTracker(kube, wave.namespace)) if wave else None
        await kube.request("POST", job_path(namespace), victim.body())
        await tracker.wait(lambda: len(tracker.bound(victim.name)) == victim.pods)
        for i in range(repeats):
            node = sorted(p["node"] for p in tracker.pods.values() if p["node"])[0]
            before = {u for u, p in tracker.pods.items() if p["node"] == node}
            nodes_seen: dict[str, float] = {}
            watcher = asyncio.create_task(_wait_not_ready(kube, node, nodes_seen))
            await asyncio.sleep(0.2)
            if wave is not None:
                wave_started = time.monotonic()
                await wave.start(kube, first + i)
                at_failure = len(wave_tracker.bound()) if wave_tracker else 0
            await make_node_not_ready(kube.api, node)
            await watcher
            await tracker.wait(functools.partial(_replaced, tracker, victim, frozenset(before)))
            replaced = [u for u in tracker.bound(victim.name) if tracker.pods[u]["node"] != node and u not in before]
            newest = max(tracker.bound_at[u] for u in tracker.bound(victim.name))
            samples.append(newest - nodes_seen["not_ready"])
            assert replaced
            moves.append({"from": node, "to": sorted(tracker.pods[u]["node"] for u in replaced)})
            if wave is not None and wave_tracker is not None:
                when_whole = len(wave_tracker.bound())
                done = await wave.finish(kube, wave_tracker)
                waves.append({"bound_at_failure": at_failure, "bound_when_whole": when_whole,
                              "all_bound_s": round(done - wave_started, 2)})  # fmt: skip
            await heal_node(kube.api, node)
            await wait_node_ready(kube.api, node)
        await delete_jobs(kube, namespace, tracker)
    out: dict[str, Any] = {
        "samples_s": [round(s, 4) for s in samples],
        "median_s": round(statistics.median(samples), 4),
        "max_s": round(max(samples), 4),
        "moves": moves,
    }
    if wave is not None:
        out["wave"] = {"gangs": wave.gangs, "pods_per_gang": wave.pods, "samples": waves}
    return out


def _replaced(tracker: PodTracker, victim: Victim, old: frozenset[str]) -> bool:
    return all(u not in tracker.pods for u in old) and len(tracker.bound(victim.name)) == victim.pods


async def _wait_not_ready(kube: Kube, node: str, seen: dict[str, float]) -> None:
    async for event in watch(kube, "/api/v1/nodes", {"fieldSelector": f"metadata.name={node}"}):
        conditions = ((event.get("object") or {}).get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") != "True" for c in conditions):
            seen["not_ready"] = time.monotonic()
            return


async def run(args: argparse.Namespace, cluster: DevCluster) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-"))
    operator = start_operator(cluster, workdir, getattr(args, "write_concurrency", DEFAULT_WRITE_CONCURRENCY))
    results: dict[str, Any] = {"nodes": args.nodes, "gpus": args.nodes * 8}
    kube = await Kube.connect(str(cluster.kubeconfig))
    try:
        for ns in ("bench-latency", "bench-stream", "bench-plain", "bench-repair", "bench-crash"):
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        await asyncio.sleep(3.0)  # operator start-up and leader election
        results["apply_to_bound_64"] = await bench_latency(kube, "bench-latency", args.repeats)
        print(f"64-pod job, apply -> all bound: {results['apply_to_bound_64']}", file=sys.stderr)
        pods_per_job = 8
        jobs = min(args.jobs, args.nodes * 8 // pods_per_job)
        results["throughput"] = await bench_throughput(
            kube, cluster.kubeconfig, jobs, pods_per_job, args.rounds, workdir, not args.no_kube_scheduler
        )
        print(f"throughput: {results['throughput']}", file=sys.stderr)
        results["node_not_ready_to_rebound"] = await bench_repair(kube, "bench-repair", args.repeats)
        print(f"repair: {results['node_not_ready_to_rebound']}", file=sys.stderr)
        results["worker_failed_to_rebound"] = await bench_worker_crash(kube, "bench-crash", args.crashes)
        print(f"worker crash: {results['worker_failed_to_rebound']}", file=sys.stderr)
    finally:
        await kube.close()
        operator.stop()
    return results


def run_benchmark(
    nodes: int = 32,
    jobs: int = 32,
    repeats: int = 5,
    rounds: int = 3,
    kube_scheduler: bool = True,
    write_concurrency: int = DEFAULT_WRITE_CONCURRENCY,
    out: Path | None = None,
    crashes: int = 20,
) -> dict[str, Any]:
    """The whole operator benchmark on a fresh dev cluster (torn down after); returns the results."""
    args = argparse.Namespace(
        nodes=nodes,
        jobs=jobs,
        repeats=repeats,
        rounds=rounds,
        no_kube_scheduler=not kube_scheduler,
        write_concurrency=write_concurrency,
        out=out,
        crashes=crashes,
    )
    return _measure(args)


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    args.repeats = getattr(args, "repeats", 5)
    args.rounds = getattr(args, "rounds", 3)
    args.crashes = getattr(args, "crashes", 20)
    from paralleljob.devcluster.cluster import down, up
    from paralleljob.devcluster.nodes import NodeShape

    name = f"bench-{os.getpid()}"
    cluster = up(name, NodeShape(count=args.nodes, gpus_per_node=8, nodes_per_rack=4), die_with_caller=True)
    try:
        results = asyncio.run(run(args, cluster))
    finally:
        down(name)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return results


def main(args: argparse.Namespace) -> int:
    results = _measure(args)
    text = json.dumps(results, indent=2)
    print(text)
    return 0

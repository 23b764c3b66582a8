"""``paralleljob bench jobs``: the operator with tens of thousands of jobs (issue 29), shaped like Kueue's
performance suite: many queues, many small jobs created as fast as the API server takes them, each finishing
after a random run time so the queue drains.

On a fresh dev cluster of ``--jobs-nodes`` kwok nodes (8 GPUs each), with the operator as a separate process:

1. room: ``--room-jobs`` jobs created one after another into the empty cluster (each runs 2 s): the time from
   the create call returning to the job's ``Placing`` phase, p50 and p99 (admission latency when room exists);
2. flood: ``--queues`` ParallelJobQueues, then ``--flood-jobs`` ParallelJobs (TP 1-2 x DP 1-4, a random queue,
   a run time uniform in ``--run-seconds``, kwok's ``complete-after`` on the pod template) created by
   ``--creators`` concurrent clients; drain time from the first create to the last job ``Succeeded``;
3. throughout: the most jobs seen waiting, the operator's pass-duration histogram while at least
   ``--busy-waiting`` jobs waited (p50/p99 as bucket bounds, and the mean), its RSS (max of samples), and
   the Lease's ``leaseTransitions`` before and after (leadership changes; there must be none).

Jobs are tracked by one watch on ParallelJobs in the bench namespace. With ``--ttl-after-finished SECONDS``
the flood's jobs carry ``spec.ttlSecondsAfterFinished`` and the operator deletes them that long after they
finish: a job counts as done when the watch saw it Succeeded, or when the object its DELETED event carries
says Succeeded (deleted right after finishing, before a MODIFIED event with that phase was seen).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION
from paralleljob.devtools import requestmix
from paralleljob.devtools.bench_kit import job_body
from paralleljob.devtools.bench_scale import PASS_METRIC, operator_under_test
from paralleljob.devtools.operatorproc import LEADER_METRIC, OperatorProcess, read_samples
from paralleljob.devtools.tracker import WatchTracker
from paralleljob.k8s.edge.constants import GROUP, QUEUE_PLURAL, VERSION
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path

NAMESPACE = "bench-jobs"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/paralleljob-operator"


class JobTracker(WatchTracker):
    """Watches the bench namespace's ParallelJobs: when each was first seen Placing (admitted) and Succeeded."""

    what = "job"

    def __init__(self, kube: Kube, namespace: str = NAMESPACE) -> None:
        super().__init__(kube, job_path(namespace))
        self.phase: dict[str, str] = {}
        self.admitted_at: dict[str, float] = {}
        self.done_at: dict[str, float] = {}
        self.gone_unseen: set[str] = set()  # deleted while the watch was down: see relisted()

    def relisted(self, items: list[dict[str, Any]]) -> None:
        """A (re)list after the watch broke off. A job seen before and missing now was deleted in the gap, and
        its DELETED event is lost: the bench deletes none and the operator deletes only finished jobs (their
        TTL), so it counts as done, at the list's time, and is reported apart (``gone_unseen``)."""
        listed = {str((item.get("metadata") or {}).get("name", "")) for item in items}
        now = time.monotonic()
        for name in [n for n in self.phase if n not in listed]:
            del self.phase[name]
            if name not in self.done_at:
                self.done_at[name] = now
                self.gone_unseen.add(name)
        for item in items:
            self._apply(item)

    def on_event(self, event: dict[str, Any]) -> None:
        """One watch event. A DELETED job (its TTL after finishing ran out, say) is judged by the object the
        event carries, its last state: done only if that says Succeeded, whatever phase was seen before."""
        kind, job = event.get("type"), event.get("object") or {}
        if kind in ("ADDED", "MODIFIED"):
            self._apply(job)
        elif kind == "DELETED":
            self._apply(job)
            self.phase.pop(str((job.get("metadata") or {}).get("name", "")), None)  # no longer waits

    def _apply(self, job: dict[str, Any]) -> None:
        name = str((job.get("metadata") or {}).get("name", ""))
        phase = str((job.get("status") or {}).get("phase") or "Pending")
        self.phase[name] = phase
        now = time.monotonic()
        if phase in ("Placing", "Running", "Succeeded") and name not in self.admitted_at:
            self.admitted_at[name] = now
        if phase == "Succeeded" and name not in self.done_at:
            self.done_at[name] = now
        self.changed.set()

    def waiting(self) -> int:
        return sum(1 for p in self.phase.values() if p in ("Pending", "Queued"))


def flood_body(
    name: str, rng: random.Random, queues: int, run_s: tuple[float, float], ttl_s: int | None = None
) -> dict[str, Any]:
    """One flood job; ``ttl_s``: its ``spec.ttlSecondsAfterFinished`` (None: the field is left out)."""
    body = job_body(name, rng.choice((1, 2)), 1, rng.choice((1, 2, 3, 4)))
    body["spec"]["queue"] = f"q{rng.randrange(queues):04d}"
    body["spec"]["template"]["metadata"] = {"annotations": {COMPLETE_AFTER_ANNOTATION: f"{rng.uniform(*run_s):.1f}s"}}
    if ttl_s is not None:
        body["spec"]["ttlSecondsAfterFinished"] = ttl_s
    return body


async def lease_transitions(kube: Kube) -> int:
    try:
        lease = await kube.request("GET", LEASE)
    except ApiError:
        return 0
    return int((lease.get("spec") or {}).get("leaseTransitions") or 0)


def histogram(operator: OperatorProcess) -> tuple[list[tuple[float, float]], float, float]:
    """The pass-duration histogram's buckets, count and sum from one read of ``/metrics`` (three reads could
    disagree, and a read that timed out under load read as 0 passes: a 10,000-job run reported -417)."""
    for attempt in range(5):
        try:
            text = operator.metrics()
            break
        except OSError:
            if attempt == 4:
                raise
            time.sleep(1.0)
    pattern = rf'^{PASS_METRIC}_bucket{{le="([^"]+)"}} ([0-9.e+-]+)$'
    rows = [(float(le), float(n)) for le, n in re.findall(pattern, text, re.MULTILINE)]

    def one(name: str) -> float:
        match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    return rows, one(f"{PASS_METRIC}_count"), one(f"{PASS_METRIC}_sum")


def quantile_bound(before: list[tuple[float, float]], after: list[tuple[float, float]], q: float) -> float:
    prior = dict(before)
    counts = [(le, n - prior.get(le, 0.0)) for le, n in after]
    total = counts[-1][1] if counts else 0.0
    return next((le for le, n in counts if total and n >= q * total), float("nan"))


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def room_latency(kube: Kube, tracker: JobTracker, count: int) -> dict[str, Any]:
    samples = []
    for i in range(count):
        name = f"room-{i}"
        body = job_body(name, 1, 1, 1)
        body["spec"]["template"]["metadata"] = {"annotations": {COMPLETE_AFTER_ANNOTATION: "2s"}}
        await kube.request("POST", job_path(NAMESPACE), body)
        created = time.monotonic()
        await tracker.wait(functools.partial(tracker.admitted_at.__contains__, name), 60)
        samples.append(tracker.admitted_at[name] - created)
    return {
        "jobs": count,
        "p50_s": round(percentile(samples, 0.5), 3),
        "p99_s": round(percentile(samples, 0.99), 3),
        "max_s": round(max(samples), 3),
    }


async def flood(kube: Kube, tracker: JobTracker, operator: OperatorProcess, args: Any) -> dict[str, Any]:
    rng = random.Random(args.seed)
    names = [f"f{i:05d}" for i in range(args.flood_jobs)]
    ttl = args.ttl_after_finished
    bodies = [flood_body(n, rng, args.queues, (args.run_min, args.run_max), ttl) for n in names]
    started = time.monotonic()
    pending = iter(bodies)
    created = 0

    async def creator() -> None:
        nonlocal created
        for body in pending:
            while True:
                try:
                    await kube.request("POST", job_path(NAMESPACE), body)
                    created += 1
                    break
                except ApiError as exc:
                    if exc.status != 429 and exc.status < 500:
                        raise
                    await asyncio.sleep(0.2)

    samples: dict[str, Any] = {"rss_mb": 0.0, "max_waiting": 0}
    busy: dict[str, Any] = {}

    wanted = (f"{PASS_METRIC}_count", f"{PASS_METRIC}_sum", LEADER_METRIC)

    async def sampler() -> None:
        read = operator.samples(*wanted)
        last = (time.monotonic(), read[wanted[0]], read[wanted[1]])
        tick = 0
        while True:
            tick += 1
            if tick % 5:  # /metrics once every 5 s: with 1,000 queues each render costs the operator ~0.3 s
                samples["max_waiting"] = max(samples["max_waiting"], tracker.waiting())
                await asyncio.sleep(1.0)
                continue
            try:  # off the loop: a busy operator answers late, and the job watch must go on meanwhile
                read = read_samples(await asyncio.to_thread(operator.metrics), wanted)
            except OSError as exc:  # not zeros: a missed read once showed "-993 passes, leader False"
                print(f"{time.monotonic() - started:.0f} s: /metrics not read ({exc})", file=sys.stderr, flush=True)
                samples["metrics_unread"] = samples.get("metrics_unread", 0) + 1
                await asyncio.sleep(1.0)
                continue
            now, count, total = time.monotonic(), read[wanted[0]], read[wanted[1]]
            if now - last[0] >= 30.0:  # a line every 30 s, so a run cut short still says how far it got
                passes = count - last[1]
                mean = f"{(total - last[2]) / passes * 1e3:.0f} ms" if passes else "-"
                print(
                    f"{now - started:.0f} s: created {created}, admitted {len(tracker.admitted_at)},"
                    f" succeeded {len(tracker.done_at)}, waiting {tracker.waiting()}; {passes:.0f} passes,"
                    f" mean {mean}; RSS {operator.rss_mb():.0f} MB; leader {read[LEADER_METRIC] >= 1.0}",
                    file=sys.stderr,
                    flush=True,
                )
                last = (now, count, total)
            samples["rss_mb"] = max(samples["rss_mb"], operator.rss_mb())
            waiting = tracker.waiting()
            samples["max_waiting"] = max(samples["max_waiting"], waiting)
            if waiting >= args.busy_waiting and "start" not in busy:
                busy["start"] = await asyncio.to_thread(histogram, operator)
                busy["since"] = time.monotonic()
            elif waiting < args.busy_waiting and "start" in busy and "end" not in busy:
                busy["end"] = await asyncio.to_thread(histogram, operator)
                busy["seconds"] = time.monotonic() - busy["since"]
            await asyncio.sleep(1.0)

    watcher = asyncio.create_task(sampler())
    try:
        await asyncio.gather(*(creator() for _ in range(args.creators)))
        created_s = time.monotonic() - started
        print(f"created {created} jobs in {created_s:.1f} s", file=sys.stderr, flush=True)
        done = set(names)
        await tracker.wait(lambda: done.issubset(tracker.done_at), args.drain_timeout)
    finally:
        watcher.cancel()
    drain_s = max(tracker.done_at[n] for n in names) - started
    out: dict[str, Any] = {
        "jobs": len(names),
        "queues": args.queues,
        "ttl_after_finished": ttl,
        "create_s": round(created_s, 1),
        "create_per_s": round(len(names) / created_s, 1),
        "drain_s": round(drain_s, 1),
        "max_waiting": samples["max_waiting"],
        "done_while_unwatched": len(tracker.gone_unseen),
        "rss_mb_max": round(samples["rss_mb"], 1),
        "metrics_unread": samples.get("metrics_unread", 0),
    }
    if "start" in busy:
        end = busy["end"] if "end" in busy else await asyncio.to_thread(histogram, operator)
        (b0, c0, s0), (b1, c1, s1) = busy["start"], end
        out["busy_window"] = {
            "waiting_at_least": args.busy_waiting,
            "seconds": round(busy.get("seconds", time.monotonic() - busy["since"]), 1),
            "passes": int(c1 - c0),
            "pass_mean_ms": round((s1 - s0) / (c1 - c0) * 1e3, 1) if c1 > c0 else None,
            "pass_p50_bucket_ms": quantile_bound(b0, b1, 0.5) * 1e3,
            "pass_p99_bucket_ms": quantile_bound(b0, b1, 0.99) * 1e3,
        }
    return out


async def request_counts(cluster: DevCluster, operator: OperatorProcess) -> dict[str, requestmix.Counts]:
    """The API server's requests by verb, resource and subresource (every client), and the operator's."""
    served = await asyncio.to_thread(requestmix.apiserver_metrics, cluster.kubeconfig)
    made = await asyncio.to_thread(operator.metrics)
    return {
        "apiserver": requestmix.counter_by(served, requestmix.APISERVER_FAMILY, requestmix.APISERVER_KEYS),
        "operator": requestmix.counter_by(made, requestmix.OPERATOR_FAMILY, requestmix.OPERATOR_KEYS),
    }


async def measure(cluster: DevCluster, args: Any) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-jobs-"))
    operator = operator_under_test(cluster, workdir, "bench-leader")
    kube = await Kube.connect(str(cluster.kubeconfig), concurrency=max(48, args.creators))
    out: dict[str, Any] = {"nodes": args.jobs_nodes, "gpus": args.jobs_nodes * 8}
    try:
        with contextlib.suppress(ApiError):
            await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        await operator.wait_metric("paralleljob_reconcile_passes_total", 1.0)
        transitions = await lease_transitions(kube)
        for i in range(args.queues):
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": f"q{i:04d}"}}
            with contextlib.suppress(ApiError):
                await kube.request("POST", f"/apis/{GROUP}/{VERSION}/{QUEUE_PLURAL}", body)
        async with JobTracker(kube) as tracker:
            out["room"] = await room_latency(kube, tracker, args.room_jobs)
            print(f"room: {out['room']}", file=sys.stderr, flush=True)
            before = await request_counts(cluster, operator)
            out["flood"] = await flood(kube, tracker, operator, args)
            after = await request_counts(cluster, operator)
        out["requests_per_job"] = {
            side: requestmix.per_job(before[side], after[side], args.flood_jobs) for side in before
        }
        out["leadership_changes"] = await lease_transitions(kube) - transitions
        out["operator_restarts"] = operator.starts - 1
        renewals = requestmix.counter_by(operator.metrics(), "paralleljob_lease_renewals", ("outcome",))
        out["lease_renewals"] = {outcome: value for (outcome,), value in sorted(renewals.items())}
    finally:
        await kube.close()
        operator.stop()
    return out


def run_jobs(args: Any) -> dict[str, Any]:
    from paralleljob.devcluster.cluster import down, up
    from paralleljob.devcluster.nodes import NodeShape

    name = f"jobs-{os.getpid()}"
    cluster = up(name, NodeShape(count=args.jobs_nodes, gpus_per_node=8, nodes_per_rack=32), die_with_caller=True)
    try:
        result = asyncio.run(measure(cluster, args))
    finally:
        down(name)
    result["command"] = (
        f"paralleljob bench jobs --jobs-nodes {args.jobs_nodes} --queues {args.queues} --flood-jobs"
        f" {args.flood_jobs} --creators {args.creators} --run-min {args.run_min} --run-max {args.run_max}"
    )
    if args.ttl_after_finished is not None:
        result["command"] += f" --ttl-after-finished {args.ttl_after_finished}"
    return result

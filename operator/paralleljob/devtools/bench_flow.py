"""Throughput end to end (issue 41, item 2): the same N short jobs drained through Kueue + kube-scheduler and
through ParallelJobs, one after the other on one dev cluster, each from the first create to the last job
finished, with the API requests per job and each controller's CPU seconds and peak RSS.

The jobs are ``bench jobs``' flood: TP 1-2 x DP 1-4, a random one of ``queues`` queues, a run time uniform
in ``run_s`` that kwok ends the pods after (its ``complete-after`` annotation). For Kueue each is an Indexed
Job (DP pods asking TP GPUs, kwok's toleration) labelled with its LocalQueue; the ClusterQueues sit in
cohorts of ``COHORT_SIZE``, each with an equal share of the GPUs as nominal quota and borrowing within its
cohort unlimited (Kueue's default), over a plain ResourceFlavor on the GPU nodes: no topology, so TAS is
not in Kueue's path (the fastest Kueue configuration for jobs that ask for none). A Job is done when its
``Complete`` condition is True. For us each is a ParallelJob in a ParallelJobQueue of the same name.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paralleljob.devcluster import state
from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION
from paralleljob.devcluster.nodes import DEV_CLUSTER_LABEL
from paralleljob.devtools import requestmix
from paralleljob.devtools.bench_jobs import JobTracker
from paralleljob.devtools.bench_kit import job_body
from paralleljob.devtools.bench_kueue import _kueue
from paralleljob.devtools.bench_native import KWOK_TOLERATION
from paralleljob.devtools.flow_report import apiserver_point, cpu_and_rss, operator_point, progress_table
from paralleljob.devtools.operatorproc import OperatorMetrics, process_cpu_seconds
from paralleljob.devtools.tracker import StateTracker
from paralleljob.k8s.edge.constants import GPU_RESOURCE
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path

KUEUE_NAMESPACE = "bench-flow-kueue"
OURS_NAMESPACE = "bench-flow-pj"
COHORT_SIZE = 10
FLAVOR = "flow"
BATCH_JOBS = f"/apis/batch/v1/namespaces/{KUEUE_NAMESPACE}/jobs"
WATCHED = ("kueue-controller-manager", "kube-scheduler", "kube-apiserver", "kube-controller-manager", "kwok", "etcd")

Shape = tuple[int, int, int, float]  # TP, DP, queue index, run seconds


def shapes(count: int, queues: int, run_s: tuple[float, float], seed: int) -> list[Shape]:
    rng = random.Random(seed)
    return [(rng.choice((1, 2)), rng.choice((1, 2, 3, 4)), rng.randrange(queues), round(rng.uniform(*run_s), 1))
            for _ in range(count)]  # fmt: skip


def queue_name(index: int) -> str:
    return f"q{index:04d}"


def flow_kueue_objects(queues: int, gpus: int) -> list[tuple[str, dict[str, Any]]]:
    """The flavor, ``queues`` ClusterQueues in cohorts and their LocalQueues, in creation order."""
    quota = [{"name": GPU_RESOURCE, "nominalQuota": str(gpus // queues)}]
    groups = [{"coveredResources": [GPU_RESOURCE], "flavors": [{"name": FLAVOR, "resources": quota}]}]
    out = [_kueue("ResourceFlavor", FLAVOR, {"nodeLabels": {DEV_CLUSTER_LABEL: "true"}})]
    for i in range(queues):
        spec = {"namespaceSelector": {}, "cohortName": f"cohort-{i // COHORT_SIZE:03d}", "resourceGroups": groups}
        out.append(_kueue("ClusterQueue", queue_name(i), spec))
    out += [
        _kueue("LocalQueue", queue_name(i), {"clusterQueue": queue_name(i)}, KUEUE_NAMESPACE) for i in range(queues)
    ]
    return out


def indexed_job(name: str, shape: Shape) -> dict[str, Any]:
    tp, dp, queue, run_s = shape
    resources = {GPU_RESOURCE: str(tp)}
    template = {
        "metadata": {"annotations": {COMPLETE_AFTER_ANNOTATION: f"{run_s}s"}},
        "spec": {
            "restartPolicy": "Never",
            "tolerations": [KWOK_TOLERATION],
            "containers": [
                {"name": "c", "image": "bench:1", "resources": {"requests": resources, "limits": resources}}
            ],
        },
    }
    spec = {"completionMode": "Indexed", "parallelism": dp, "completions": dp, "suspend": True, "template": template}
    labels = {"kueue.x-k8s.io/queue-name": queue_name(queue)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels}, "spec": spec}


def parallel_job(name: str, shape: Shape) -> dict[str, Any]:
    tp, dp, queue, run_s = shape
    body = job_body(name, tp, 1, dp)
    body["spec"]["queue"] = queue_name(queue)
    body["spec"]["template"]["metadata"] = {"annotations": {COMPLETE_AFTER_ANNOTATION: f"{run_s}s"}}
    return body


class BatchJobTracker(StateTracker):
    """Watches the Kueue namespace's Jobs: when each was first seen with ``Complete`` True."""

    what = "batch job"

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube, BATCH_JOBS)
        self.done_at: dict[str, float] = {}

    def seen(self, job: dict[str, Any]) -> None:
        name = str((job.get("metadata") or {}).get("name", ""))
        conditions = (job.get("status") or {}).get("conditions") or []
        if name not in self.done_at and any(
            c.get("type") == "Complete" and c.get("status") == "True" for c in conditions
        ):
            self.done_at[name] = time.monotonic()
            self.changed.set()


def controller_pids(cluster_name: str, operator_pid: int | None) -> dict[str, int]:
    record = state.load(cluster_name)
    pids = {p.name: p.pid for p in (record.processes if record else []) if p.name in WATCHED}
    if operator_pid is not None:
        pids["operator"] = operator_pid
    return pids


async def served_requests(kubeconfig: Path) -> requestmix.Counts:
    """The API server's requests served so far, by verb and resource (every client's)."""
    text = await asyncio.to_thread(requestmix.apiserver_metrics, kubeconfig)
    return requestmix.counter_by(text, requestmix.APISERVER_FAMILY, requestmix.APISERVER_KEYS)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    return {name: process_cpu_seconds(pid) for name, pid in pids.items()}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


async def _create(kube: Kube, path: str, bodies: list[dict[str, Any]], creators: int, made: list[int]) -> float:
    pending = iter(bodies)

    async def creator() -> None:
        for body in pending:
            while True:
                try:
                    await kube.request("POST", path, body)
                    made[0] += 1
                    break
                except ApiError as exc:
                    if exc.status not in (0, 429) and exc.status < 500:
                        raise
                    await asyncio.sleep(0.2)

    started = time.monotonic()
    await asyncio.gather(*(creator() for _ in range(creators)))
    return time.monotonic() - started


class Progress:
    """A drain's progress series: every ``every_s`` a cumulative point (seconds since the first create, jobs
    finished and created, each controller's CPU seconds since the start and RSS, the operator's pass,
    list and request counters, the API server's requests and latency by verb), each also appended to
    ``path`` as a JSON line and printed, so a drain stopped or killed still leaves what it got to."""

    def __init__(self, kubeconfig: Path, pids: dict[str, int], operator: OperatorMetrics | None,
                 path: Path | None) -> None:  # fmt: skip
        self.kubeconfig, self.pids, self.operator, self.path = kubeconfig, pids, operator, path
        self.points: list[dict[str, Any]] = []
        self.cpu_before: dict[str, float] = {}
        self.started = 0.0

    def begin(self) -> None:
        self.started = time.monotonic()
        self.cpu_before = cpu_seconds(self.pids)
        if self.path is not None:
            self.path.write_text("")

    async def take(self, done: int, created: int, waiting: int | None, at: float | None = None) -> dict[str, Any]:
        point: dict[str, Any] = {
            "t": round(time.monotonic() - self.started if at is None else at, 1),
            "done": done,
            "created": created,
            "waiting": waiting,
            "cpu_s": {n: round(process_cpu_seconds(p) - self.cpu_before[n], 2) for n, p in self.pids.items()},
            "rss_mb": {n: round(rss_mb(p)) for n, p in self.pids.items()},
        }
        if self.operator is not None:
            try:  # off the loop: a busy operator answers late, and the job watch must go on meanwhile
                point["operator"] = operator_point(await asyncio.to_thread(self.operator.metrics))
            except OSError:
                point["operator"] = {}
        try:
            text = await asyncio.to_thread(requestmix.apiserver_metrics, self.kubeconfig)
            point["apiserver"] = apiserver_point(text)
        except (OSError, subprocess.SubprocessError):
            point["apiserver"] = {}
        self.points.append(point)
        if self.path is not None:
            with self.path.open("a") as fh:
                fh.write(json.dumps(point, sort_keys=True) + "\n")
        if len(self.points) > 1:
            print(progress_table(self.points[-2:]).splitlines()[-1], file=sys.stderr, flush=True)
        return point


async def drain(kube: Kube, kubeconfig: Path, pids: dict[str, int], who: str, jobs: list[Shape], creators: int,
                timeout_s: float, operator: OperatorMetrics | None = None, progress_path: Path | None = None,
                every_s: float = 30.0, restart: Callable[[], int | None] | None = None,
                race_s: float | None = None) -> dict[str, Any]:  # fmt: skip  # params: one drain, as the CLI sets it
    """Create every job of ``who`` (``kueue`` or ``ours``), wait until all finished, read what it cost; its
    ``progress`` is the series ``Progress`` takes (``operator``: whose ``/metrics`` it reads too).

    ``restart`` is asked each second to start the operator again if it exited (its new pid, else None), as its
    Deployment would after it stepped down or crashed; each restart is in ``operator_restarts_at`` and the
    operator's CPU seconds add up its instances (each to its last second). ``race_s`` stops the drain that
    long after its first create (at the latest): the time another side took to drain the same jobs."""
    names = [f"f{i:05d}" for i in range(len(jobs))]
    tracker: BatchJobTracker | JobTracker
    if who == "kueue":
        path, bodies, tracker = (
            BATCH_JOBS,
            [indexed_job(n, s) for n, s in zip(names, jobs, strict=True)],
            BatchJobTracker(kube),
        )
    else:
        path, bodies = job_path(OURS_NAMESPACE), [parallel_job(n, s) for n, s in zip(names, jobs, strict=True)]
        tracker = JobTracker(kube, OURS_NAMESPACE)
    served = await served_requests(kubeconfig)
    cpu_before = cpu_seconds(pids)
    peak = {name: rss_mb(pid) for name, pid in pids.items()}
    made = [0]
    progress = Progress(kubeconfig, pids, operator, progress_path)

    async def point(at: float | None = None) -> None:
        waiting = tracker.waiting() if isinstance(tracker, JobTracker) else None
        await progress.take(len(tracker.done_at), made[0], waiting, at)

    restarts: list[float] = []
    last_cpu = dict(cpu_before)

    def restarted_operator() -> None:
        pid = restart() if restart is not None else None
        if pid is None:
            return
        restarts.append(round(time.monotonic() - progress.started, 1))
        # the CPU of the instance that ended counts (to its last sample): later readings add the new one's
        offset = last_cpu["operator"] - cpu_before["operator"]
        pids["operator"] = pid
        cpu_before["operator"] = progress.cpu_before["operator"] = -offset

    async def sample() -> None:
        next_point = every_s
        while True:
            await asyncio.sleep(1.0)
            restarted_operator()
            for name, pid in pids.items():
                peak[name] = max(peak[name], rss_mb(pid))
                last_cpu[name] = process_cpu_seconds(pid) or last_cpu[name]
            if time.monotonic() - progress.started >= next_point:
                next_point += every_s
                await point()

    async with tracker:
        progress.begin()
        await point(at=0.0)  # the baseline, before the first create
        started = progress.started = time.monotonic()
        sampler = asyncio.create_task(sample())
        stopped = False
        try:
            create_s = await _create(kube, path, bodies, creators, made)
            wait_s = timeout_s if race_s is None else max(1.0, min(timeout_s, race_s - create_s))
            await tracker.wait(lambda: len(tracker.done_at) >= len(names), wait_s)
        except TimeoutError:
            stopped = True  # a drain past its limit still says how far it got and what that cost
        finally:
            sampler.cancel()
        await point()
        finished = [i for i, name in enumerate(names) if name in tracker.done_at]
        drain_s = time.monotonic() - started if stopped else max(tracker.done_at.values()) - started
    cpu_after = cpu_seconds(pids)
    after = await served_requests(kubeconfig)
    return {
        "jobs": len(jobs),
        "pods": sum(s[1] for s in jobs),
        "finished_jobs": len(finished),
        "finished_pods": sum(jobs[i][1] for i in finished),
        "stopped_at_limit": stopped,
        "create_s": round(create_s, 1),
        "drain_s": round(drain_s, 1),
        "requests_per_job": requestmix.per_job(served, after, len(jobs)),
        "processes": cpu_and_rss(cpu_before, cpu_after, peak),
        "operator_restarts_at": restarts,
        "progress": progress.points,
    }


async def clear(kube: Kube, who: str, stall_s: float = 600.0) -> None:
    """A drain's jobs and pods gone (off the clock), so the next drain starts on an empty cluster. A bulk
    delete dropped by the client's timeout stops on the server too, so it is sent again until all are gone;
    a drain stopped at its limit can leave tens of thousands, so it gives up only when nothing went for
    ``stall_s``."""
    namespace = KUEUE_NAMESPACE if who == "kueue" else OURS_NAMESPACE
    jobs = BATCH_JOBS if who == "kueue" else job_path(namespace)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    deadline, left = time.monotonic() + stall_s, None
    while True:
        now_left = await _count(kube, jobs) + await _count(kube, pods)
        if not now_left:
            return
        if left is None or now_left < left:
            deadline, left = time.monotonic() + stall_s, now_left
        elif time.monotonic() > deadline:
            raise TimeoutError(f"{who}'s {now_left} jobs and pods left no fewer for {stall_s:.0f} s")
        try:
            await kube.request("DELETE", jobs, {"propagationPolicy": "Background"})
            await kube.request("DELETE", pods, {"gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 0:
                raise
        await asyncio.sleep(2.0)


async def _count(kube: Kube, path: str) -> int:
    """How many objects a list URL holds, from one item and the API server's ``remainingItemCount``: a
    backlog of tens of thousands is not listed whole every two seconds while the API server deletes it."""
    data = await kube.request("GET", path, query={"limit": "1"}, first=True)
    return len(data.get("items") or []) + int((data.get("metadata") or {}).get("remainingItemCount") or 0)

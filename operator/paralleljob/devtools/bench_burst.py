"""A wave of gangs at once (issue 41, items 2 and 3): ``gangs`` gangs of ``pods`` one-GPU pods created
together on an empty cluster, through Kueue + kube-scheduler or through the operator, timed from the first
create to the last pod bound (seen by this process's watch) and set against the ceiling's create + bind.

The drains measure a scheduler among job churn, where a job's own writes weigh as much as its pods'. Here
the work is the ceiling's work: every pod created and bound once, a few writes per gang besides (ours: the
ParallelJob, its placement status, Service and Event; Kueue's: the Job, its Workload and their statuses),
so the share says how near each path comes to what the API server can take when placing is all there is to
do. Kueue's gangs are Indexed Jobs (parallelism = completions = pods, ``suspend``, one GPU a pod) in one
ClusterQueue whose quota is every GPU, over a plain ResourceFlavor (no topology: Kueue's fastest setup);
ours are ParallelJobs of TP1 x PP1 x DP ``pods`` in one ParallelJobQueue. The pods run until deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from statistics import median
from typing import Any

from paralleljob.devcluster.nodes import DEV_CLUSTER_LABEL
from paralleljob.devtools import requestmix
from paralleljob.devtools.bench_flow import cpu_seconds, rss_mb, served_requests
from paralleljob.devtools.bench_kit import job_body
from paralleljob.devtools.bench_kueue import _kueue
from paralleljob.devtools.bench_native import KWOK_TOLERATION
from paralleljob.devtools.flow_report import cpu_and_rss, rate, share
from paralleljob.devtools.tracker import StateTracker
from paralleljob.k8s.edge.constants import GPU_RESOURCE, GROUP, QUEUE_PLURAL, VERSION
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, pod_path

NAMESPACES = {"kueue": "bench-burst-kueue", "ours": "bench-burst-pj"}
QUEUE = "burst"
BATCH_JOBS = f"/apis/batch/v1/namespaces/{NAMESPACES['kueue']}/jobs"


def kueue_gang(name: str, pods: int) -> dict[str, Any]:
    one_gpu = {GPU_RESOURCE: "1"}
    container = {"name": "c", "image": "bench:1", "resources": {"requests": one_gpu, "limits": one_gpu}}
    template = {"spec": {"restartPolicy": "Never", "tolerations": [KWOK_TOLERATION], "containers": [container]}}
    spec = {
        "completionMode": "Indexed",
        "parallelism": pods,
        "completions": pods,
        "suspend": True,
        "template": template,
    }
    labels = {"kueue.x-k8s.io/queue-name": QUEUE}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels}, "spec": spec}


def our_gang(name: str, pods: int) -> dict[str, Any]:
    body = job_body(name, 1, 1, pods)
    body["spec"]["queue"] = QUEUE
    return body


def queue_objects(who: str, gpus: int) -> list[tuple[str, dict[str, Any]]]:
    """What the side's gangs queue in, in creation order: room for every GPU, no cohort, no topology."""
    if who == "ours":
        queue = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": QUEUE}}
        return [(f"/apis/{GROUP}/{VERSION}/{QUEUE_PLURAL}", queue)]
    quota = [{"name": GPU_RESOURCE, "nominalQuota": str(gpus)}]
    groups = [{"coveredResources": [GPU_RESOURCE], "flavors": [{"name": QUEUE, "resources": quota}]}]
    return [
        _kueue("ResourceFlavor", QUEUE, {"nodeLabels": {DEV_CLUSTER_LABEL: "true"}}),
        _kueue("ClusterQueue", QUEUE, {"namespaceSelector": {}, "resourceGroups": groups}),
        _kueue("LocalQueue", QUEUE, {"clusterQueue": QUEUE}, NAMESPACES["kueue"]),
    ]


class Bound(StateTracker):
    """When each pod of the namespace was first seen bound (a node name), and the gang (its owner) it is of."""

    what = "burst pod"

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(kube, pod_path(namespace))
        self.bound_at: dict[str, float] = {}
        self.gang_of: dict[str, str] = {}

    def seen(self, pod: dict[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        name = str(metadata.get("name", ""))
        if name in self.bound_at or not (pod.get("spec") or {}).get("nodeName"):
            return
        self.bound_at[name] = time.monotonic()
        owners = metadata.get("ownerReferences") or [{}]
        self.gang_of[name] = str(owners[0].get("name", ""))
        self.changed.set()


def gang_times(tracker: Bound, started: float, pods: int) -> list[float]:
    """Per gang whose ``pods`` pods are all bound, seconds from the first create to its last bind (the gang
    is whole then), sorted."""
    last: dict[str, float] = {}
    count: dict[str, int] = {}
    for pod, at in tracker.bound_at.items():
        gang = tracker.gang_of[pod]
        last[gang] = max(last.get(gang, 0.0), at - started)
        count[gang] = count.get(gang, 0) + 1
    return sorted(round(t, 2) for gang, t in last.items() if count[gang] >= pods)


async def burst(  # params: one side's wave, as the parts runner sets it
    kube: Kube, kubeconfig: Path, pids: dict[str, int], who: str, gangs: int, pods: int, timeout_s: float
) -> dict[str, Any]:
    """Create every gang of ``who`` at once (a client each), wait until every pod is bound; what it took and
    cost: requests by the API server's own counter (every client's), CPU and peak RSS of ``pids``."""
    namespace = NAMESPACES[who]
    with contextlib.suppress(ApiError):
        await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    items, _ = await kube.list("/api/v1/nodes")
    for path, body in queue_objects(who, 8 * len(items)):
        with contextlib.suppress(ApiError):  # a second burst on the same cluster finds them there
            await kube.request("POST", path, body)
    path = BATCH_JOBS if who == "kueue" else job_path(namespace)
    make = kueue_gang if who == "kueue" else our_gang
    bodies = [make(f"b{i:04d}", pods) for i in range(gangs)]
    served = await served_requests(kubeconfig)
    cpu_before = cpu_seconds(pids)
    peak = {name: rss_mb(pid) for name, pid in pids.items()}
    total = gangs * pods

    async def sample() -> None:
        while True:
            await asyncio.sleep(0.5)
            for name, pid in pids.items():
                peak[name] = max(peak[name], rss_mb(pid))

    async with Bound(kube, namespace) as tracker:  # the watch is open before the first create
        sampler = asyncio.create_task(sample())
        started, stopped = time.monotonic(), False
        try:
            await asyncio.gather(*(kube.request("POST", path, body) for body in bodies))
            created_s = time.monotonic() - started
            await tracker.wait(lambda: len(tracker.bound_at) >= total, timeout_s)
        except TimeoutError:
            stopped = True  # what was bound by then still says how far it got
        finally:
            sampler.cancel()
        bound = len(tracker.bound_at)
        seconds = time.monotonic() - started if stopped or not bound else max(tracker.bound_at.values()) - started
        whole = gang_times(tracker, started, pods)
    cpu_after = cpu_seconds(pids)
    after = await served_requests(kubeconfig)
    return {
        "gangs": gangs,
        "pods": total,
        "bound_pods": bound,
        "stopped_at_limit": stopped,
        "created_s": round(created_s, 2),
        "seconds": round(seconds, 2),
        "pods_per_s": rate(bound, seconds),
        "gangs_whole": len(whole),
        "gang_whole_s": {"first": whole[0], "median": round(median(whole), 2), "last": whole[-1]} if whole else {},
        "requests_per_pod": requestmix.per_job(served, after, total),
        "processes": cpu_and_rss(cpu_before, cpu_after, peak),
    }


async def clear(kube: Kube, who: str, timeout_s: float = 600.0) -> None:
    """The side's gangs and pods gone (off the clock), sent again while any is left: a bulk delete the client
    gave up on stops on the server too."""
    namespace = NAMESPACES[who]
    jobs = BATCH_JOBS if who == "kueue" else job_path(namespace)
    deadline = time.monotonic() + timeout_s
    while (await kube.list(jobs))[0] or (await kube.list(pod_path(namespace)))[0]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{who}'s burst gangs still there after {timeout_s:.0f} s")
        try:
            await kube.request("DELETE", jobs, {"propagationPolicy": "Background"})
            await kube.request("DELETE", pod_path(namespace), {"gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 0:
                raise
        await asyncio.sleep(1.0)


def against_ceiling(ceiling: dict[str, Any], bursts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each burst's pods bound per second as a share of the ceiling's create + bind rate (the same pods'
    creates and binds from a raw client, kwok's status writes alike) and, when measured, of its rates for
    pods with only what the SPEC names and for pods the size of the operator's workers; and ours over
    Kueue's."""
    out: dict[str, Any] = {}
    for who, b in bursts.items():
        out[who] = {"pods_per_s": b["pods_per_s"]}
        for part in ("create_bind", "create_bind_spec", "create_bind_worker"):
            if part in ceiling:  # runs before the SPEC-minimum and worker-sized passes have none
                out[who][f"share_of_{part}"] = share(b["pods_per_s"], ceiling[part]["pods_per_s"])
    if "kueue" in bursts and "ours" in bursts:
        out["ours_over_kueue"] = share(bursts["ours"]["pods_per_s"], bursts["kueue"]["pods_per_s"])
    return out


def table(bursts: dict[str, dict[str, Any]], shares: dict[str, Any]) -> str:
    lines = [
        "| side | gangs x pods | first create -> last pod bound s | pods/s | share of create+bind"
        " (tiny pods / SPEC minimum / worker-sized) | gang whole s (first / median / last) | API requests / pod"
        " | controller CPU s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for who, b in bursts.items():
        controller = b["processes"].get("kueue-controller-manager" if who == "kueue" else "operator", {})
        whole = b["gang_whole_s"] or {"first": "-", "median": "-", "last": "-"}
        lines.append(
            f"| {who} | {b['gangs']} x {b['pods'] // b['gangs']} | {b['seconds']} | {b['pods_per_s']}"
            f" | {shares.get(who, {}).get('share_of_create_bind', '-')}"
            f" / {shares.get(who, {}).get('share_of_create_bind_spec', '-')}"
            f" / {shares.get(who, {}).get('share_of_create_bind_worker', '-')}"
            f" | {whole['first']} / {whole['median']} / {whole['last']} | {b['requests_per_pod']['all']}"
            f" | {controller.get('cpu_s', '-')} |"
        )
    return "\n".join(lines)

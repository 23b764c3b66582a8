"""The ceiling any scheduler on this machine can reach (issue 41, item 3): the API server's own rate for
pod create + bind, and create + bind + a status write, from a raw client at full concurrency beside the
same kwok nodes, with no scheduler in the loop; and the rate of whole pod lives (create + bind, then kwok
runs the pod and ends it at once), the bound for a drain of jobs that end as soon as they start; and
create + bind once more of pods that carry what one of the operator's worker pods carries (``worker``).

The pods name a scheduler nobody runs (so kube-scheduler and the operator leave them alone), carry kwok's
toleration and no resource requests (capacity is not what is measured), and are bound round-robin over the
kwok nodes by POSTing their ``binding`` subresource, as kube-scheduler does. kwok then starts them as it
starts any pod, so its status writes load the API server just as in the drains the ceiling is set against.
Each pass creates ``pods`` pods from ``concurrency`` workers and is timed from the first create to the last
call answered (the lifecycle pass: to the last pod seen Succeeded by a watch); the namespace's pods are
deleted and gone before the next pass.

The raw passes' pods are as small as a pod can be; a worker of a training gang is not (its torchrun
environment, rank labels and annotations: ~1.7 KB of JSON against ~0.3 KB), and the API server's work per
write grows with the object it decodes, stores and sends to every watcher. The ``create_bind_worker`` pass
creates pods rendered by the operator's own renderer for a TP1 x DP40 job, their names, labels' keys and
scheduler changed so that nothing (the operator, kube-scheduler, the garbage collector) acts on them, and no
owner: the ceiling for pods of that size. The ``create_bind_spec`` pass creates the least any worker may
carry: the same pod cut down to what SPEC.md's **Pods** paragraph names (the job, replica and stage labels,
the ``gpu-indices`` annotation, the GPU limit and the fifteen rank and rendezvous variables), and still
without the owner and the headless Service's hostname and subdomain the SPEC also asks for; no controller
that writes the pods the SPEC describes can create and bind them faster than a raw client does this one, on
the same machine at the same moment.

With ``rounds`` above one the passes run that many times, each round starting one pass further along, and
each pass reports the medians of its runs: the machine's load moves a single run by a third.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import statistics
import sys
import time
from typing import Any

from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION
from paralleljob.devtools.bench_kit import job_body
from paralleljob.devtools.bench_native import KWOK_TOLERATION
from paralleljob.devtools.flow_report import rate
from paralleljob.devtools.tracker import StateTracker
from paralleljob.k8s.edge.constants import (
    GPU_INDICES_ANNOTATION,
    GPU_RESOURCE,
    JOB_LABEL,
    REPLICA_LABEL,
    SCHEDULER_NAME,
    STAGE_LABEL,
)
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.manifests import worker_pod
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.plan.kinds.sizings import sizing_of
from paralleljob.k8s.runtime.api import ApiError, Kube, pod_path

NAMESPACE = "bench-ceiling"
NO_SCHEDULER = "paralleljob-bench-nobody"  # no scheduler serves it: only this client binds these pods
CONDITION = "paralleljob.dev/BenchCeiling"


def pod_manifest(name: str, ends_at_once: bool = False) -> dict[str, Any]:
    """``ends_at_once``: kwok ends the pod as soon as it runs (the drains' ``complete-after``, at 0 s)."""
    metadata: dict[str, Any] = {"name": name}
    if ends_at_once:
        metadata["annotations"] = {COMPLETE_AFTER_ANNOTATION: "0s"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "restartPolicy": "Never",
            "tolerations": [KWOK_TOLERATION],
            "containers": [{"name": "c", "image": "bench:1"}],
        },
    }


@functools.cache
def _rendered_worker() -> dict[str, Any]:
    """Worker 17 of a TP1 x DP40 ParallelJob as the operator renders it (its GPU on ``gpu-node-0123``)."""
    body = job_body("b0007", 1, 1, 40)
    body["metadata"].update({"namespace": NAMESPACE, "uid": "bench-ceiling-worker"})
    job = parse_job(body)
    assert job.request is not None
    slots = tuple(PodSlot(f"b0007-d{d}-p0", d, 0, f"gpu-node-{d:04d}", (3,)) for d in range(40))
    record = PlacementRecord(1, "seed", 1, 1, 40, slots, job.request.rank_order)
    return worker_pod(job, job.request, record, slots[17], 0, sizing_of(job.request))


def worker_manifest(name: str, ends_at_once: bool = False) -> dict[str, Any]:
    """A pod the size of an operator's worker, that only this client acts on: the rendered worker renamed,
    its labels' and annotations' keys moved out of the operator's prefix, no owner, nobody's scheduler."""
    pod = copy.deepcopy(_rendered_worker())
    meta = pod["metadata"]
    meta["name"] = name
    for part in ("labels", "annotations"):
        meta[part] = {f"bench.{key}": value for key, value in meta[part].items()}
    if ends_at_once:
        meta["annotations"][COMPLETE_AFTER_ANNOTATION] = "0s"
    del meta["ownerReferences"], meta["namespace"]
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    pod["spec"].update({"schedulerName": NO_SCHEDULER, "hostname": name, "tolerations": [KWOK_TOLERATION]})
    return pod


# What SPEC.md's Pods paragraph names a worker's environment and metadata; the rest of a worker's is ours.
SPEC_ENV = frozenset({
    "PJ_TP_SIZE", "PJ_PP_SIZE", "PJ_DP_SIZE", "PJ_PP_RANK", "PJ_DP_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
    "MASTER_PORT", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
    "PJ_RANK_ORDER",
})  # fmt: skip
SPEC_LABELS = (JOB_LABEL, REPLICA_LABEL, STAGE_LABEL)
SPEC_ANNOTATIONS = (GPU_INDICES_ANNOTATION,)


def spec_minimum_manifest(name: str, ends_at_once: bool = False) -> dict[str, Any]:
    """The worker of :func:`worker_manifest` with only what the SPEC names: a lower bound on any worker."""
    pod = worker_manifest(name, ends_at_once)
    meta, container = pod["metadata"], pod["spec"]["containers"][0]
    meta["labels"] = {f"bench.{key}": meta["labels"][f"bench.{key}"] for key in SPEC_LABELS}
    kept = {f"bench.{key}" for key in SPEC_ANNOTATIONS} | {COMPLETE_AFTER_ANNOTATION}
    meta["annotations"] = {key: value for key, value in meta["annotations"].items() if key in kept}
    container["env"] = [item for item in container["env"] if item["name"] in SPEC_ENV]
    container["resources"] = {"limits": {GPU_RESOURCE: container["resources"]["limits"][GPU_RESOURCE]}}
    del pod["spec"]["hostname"], pod["spec"]["subdomain"]
    return pod


def binding(name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}}


def status_patch() -> dict[str, Any]:
    """A condition of our own: the write lands on pods/status as a kubelet's or scheduler's would."""
    return {"status": {"conditions": [{"type": CONDITION, "status": "True"}]}}


async def _retrying(call: Any) -> None:
    """One call, retried while the API server sheds load (429, 5xx, a dropped connection)."""
    while True:
        try:
            await call()
            return
        except ApiError as exc:
            if exc.status not in (0, 429) and exc.status < 500:
                raise
            await asyncio.sleep(0.1)


class Succeeded(StateTracker):
    """The names of the namespace's pods seen Succeeded."""

    what = "ceiling pod"

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube, pod_path(NAMESPACE))
        self.names: set[str] = set()

    def seen(self, pod: dict[str, Any]) -> None:
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            self.names.add(str((pod.get("metadata") or {}).get("name", "")))
            self.changed.set()


PASSES = ("create_bind", "create_bind_status", "lifecycle", "create_bind_spec", "create_bind_worker")
MANIFESTS = {"create_bind_worker": worker_manifest, "create_bind_spec": spec_minimum_manifest}


async def one_pass(kube: Kube, nodes: list[str], pods: int, concurrency: int, part: str) -> dict[str, Any]:
    """One of :data:`PASSES`. ``requests_per_s`` counts this client's calls only (the lifecycle pass: not
    kwok's status writes)."""
    status, ends_at_once, tag = part == "create_bind_status", part == "lifecycle", part.replace("_", "-")
    manifest_of = MANIFESTS.get(part, pod_manifest)
    names = iter(range(pods))

    async def worker() -> None:
        for i in names:
            name = f"{tag}-{i:06d}"
            path = pod_path(NAMESPACE, name)
            manifest = manifest_of(name, ends_at_once)
            await _retrying(lambda m=manifest: kube.request("POST", pod_path(NAMESPACE), m))
            target = binding(name, nodes[i % len(nodes)])
            await _retrying(lambda p=path, b=target: kube.request("POST", f"{p}/binding", b))
            if status:
                await _retrying(
                    lambda p=path: kube.request(
                        "PATCH", f"{p}/status", status_patch(), content_type="application/strategic-merge-patch+json"
                    )
                )

    if ends_at_once:
        async with Succeeded(kube) as succeeded:  # the watch is open before the first create
            started = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            await succeeded.wait(lambda: len(succeeded.names) >= pods, timeout_s=max(600.0, pods / 2))
    else:
        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.monotonic() - started
    return {"pods": pods, "concurrency": concurrency, "seconds": round(seconds, 1), "pods_per_s": rate(pods, seconds),
            "requests_per_s": rate(pods * (3 if status else 2), seconds)}  # fmt: skip


async def clear(kube: Kube, timeout_s: float = 600.0) -> None:
    """Every ceiling pod gone. A delete of thousands of pods can outlast the client's 30 s timeout on a
    loaded machine, and the API server stops deleting when the request is dropped: the delete is sent
    again until no pod is left."""
    deadline = time.monotonic() + timeout_s
    while (await kube.list(pod_path(NAMESPACE)))[0]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"ceiling pods still there after {timeout_s:.0f} s")
        try:
            await kube.request("DELETE", pod_path(NAMESPACE), {"gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 0:
                raise


def rotated(passes: tuple[str, ...], round_: int) -> tuple[str, ...]:
    """Round ``round_``'s order: each round starts one pass further along, so no pass always follows the
    same one (a pass's leftovers, kwok's late status writes, land on the next)."""
    start = round_ % len(passes)
    return passes[start:] + passes[:start]


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One pass's runs as one: the median of each figure, and every run's rate beside it."""
    if len(runs) == 1:
        return runs[0]
    figures = ("seconds", "pods_per_s", "requests_per_s")
    medians = {key: round(statistics.median(run[key] for run in runs), 2) for key in figures}
    return {**runs[0], **medians, "runs_pods_per_s": [run["pods_per_s"] for run in runs]}


async def ceiling(kube: Kube, pods: int, concurrency: int, rounds: int = 1) -> dict[str, Any]:
    """The passes, each on an empty namespace: create + bind, create + bind + status, create + bind of pods
    kwok ends at once, timed to the last one Succeeded (``lifecycle``), and create + bind of pods with only
    what the SPEC names (``create_bind_spec``) and of pods the size of the operator's workers
    (``create_bind_worker``); ``rounds`` times, rotated, each pass's medians kept."""
    with contextlib.suppress(ApiError):
        await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    items, _ = await kube.list("/api/v1/nodes")
    nodes = sorted(str(n["metadata"]["name"]) for n in items)
    runs: dict[str, list[dict[str, Any]]] = {part: [] for part in PASSES}
    for round_ in range(rounds):
        for part in rotated(PASSES, round_):
            runs[part].append(await one_pass(kube, nodes, pods, concurrency, part))
            print(f"ceiling {part} ({round_ + 1}/{rounds}): {runs[part][-1]}", file=sys.stderr, flush=True)
            await clear(kube)
    return {part: median_run(part_runs) for part, part_runs in runs.items()}

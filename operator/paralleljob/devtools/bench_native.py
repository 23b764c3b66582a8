"""``paralleljob bench native``: our placement next to kube-scheduler's own topology-aware gang scheduling,
in one run, on the same cluster (docs/benchmarks.md "Against kube-scheduler's gang scheduling").

Per size: a fresh dev cluster of that many kwok nodes (8 GPUs, 32 per rack) with the gang API on and
kube-scheduler (the API server's version, ``GangScheduling`` + ``TopologyAwareWorkloadScheduling``)
running beside the operator. The same half-full background (``native_set.background``: one pre-bound pod
per node) stays for the whole run. Then the mixed LLM set (``native_set.llm_set``) is submitted twice, all at
once each time (contention), the cluster emptied of it in between:

1. to kube-scheduler: per gang a PodGroup (gang, minCount = PP x DP, topology key = the rack label) and PP x DP
   pods asking for TP GPUs each, scheduler ``default-scheduler``;
2. to us: per gang a ParallelJob of that shape and cost model.

For each: gangs placed whole, gangs half-bound when the run settles (some but not all pods bound), apply ->
bound per gang and pods/s over the whole set, and for every placed gang its communication cost under our cost
model on the operator's own view of the nodes, and the step time of the simulator's step-time model.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paralleljob.devcluster import kubeline
from paralleljob.devcluster.cluster import DevCluster, down, up
from paralleljob.devcluster.nodes import LEAF_LABEL, NodeShape
from paralleljob.devtools.bench_kit import PodTracker
from paralleljob.devtools.native_report import compare
from paralleljob.devtools.native_set import Gang, background, llm_set, placement_cost, step_ms
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import API_VERSION, GPU_RESOURCE, JOB_LABEL, KIND
from paralleljob.k8s.edge.parse.nativegroups import SCHEDULING_GROUP
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, pod_path
from paralleljob.k8s.view.clusterview import build_view

GANG_LABEL = "bench.paralleljob.dev/gang"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists"}
NODES_PER_RACK = 32
QUEUE_POLICY = "fair-backfill"
LEASE_S = 60.0
SETTLE_S = 15.0  # no new bind for this long (or every gang whole): the round is over


def _pod(namespace: str, name: str, gpus: int, labels: dict[str, str], node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tolerations": [KWOK_TOLERATION],
        "containers": [{"name": "c", "image": "bench:1", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": spec}  # fmt: skip


def job_manifest(gang: Gang) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": gang.name},
        "spec": {
            "parallelism": {"tensor": gang.tp, "pipeline": gang.pp, "data": gang.dp},
            "costModel": gang.cost_model,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "bench:1"}]}},
        },
    }


def pod_group(namespace: str, gang: Gang) -> dict[str, Any]:
    return {
        "apiVersion": f"{SCHEDULING_GROUP}/{kubeline.selected().gang_api_version}",
        "kind": "PodGroup",
        "metadata": {"name": gang.name, "namespace": namespace},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": gang.pods}},
            "schedulingConstraints": {"topology": [{"key": LEAF_LABEL}]},
        },
    }


async def gather_limited(calls: list[Any], limit: int = 32) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(call: Any) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(c) for c in calls))


async def fill(kube: Kube, shape: NodeShape, used: dict[int, int]) -> None:
    with contextlib.suppress(ApiError):
        await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench-fill"}})
    calls = [
        kube.request("POST", pod_path("bench-fill"), _pod("bench-fill", f"fill-{n}", gpus, {}, shape.node_name(n)))
        for n, gpus in used.items()
    ]
    await gather_limited(calls)


async def settle(tracker: PodTracker, total: int, started: float, limit_s: float) -> None:
    """Until every pod is bound, or nothing was bound for SETTLE_S, or ``limit_s`` passed."""
    while time.monotonic() - started < limit_s:
        bound = tracker.bound()
        if len(bound) >= total:
            return
        last = max((tracker.bound_at[u] for u in bound), default=started)
        if time.monotonic() - last > SETTLE_S:
            return
        await asyncio.sleep(0.25)


def _summary(
    gangs: list[Gang], tracker: PodTracker, started: float, key: str, costs: dict[str, float], jobs: dict[str, Any]
) -> dict[str, Any]:
    placed, half, per_gang = [], [], {}
    for gang in gangs:
        uids = [u for u, p in tracker.pods.items() if p["labels"].get(key) == gang.name and p["node"]]
        if len(uids) == gang.pods:
            placed.append(gang.name)
            per_gang[gang.name] = max(tracker.bound_at[u] for u in uids) - started
        elif uids:
            half.append(gang.name)
    bound_pods = sum(g.pods for g in gangs if g.name in placed)
    last = max(per_gang.values(), default=0.0)
    comm = [costs[n] for n in placed if n in costs]
    steps = [step_ms(jobs[n], costs[n]) for n in placed if n in costs]
    return {
        "gangs": len(gangs),
        "placed": len(placed),
        "placed_names": placed,
        "half_bound": half,
        "apply_to_bound_median_s": round(statistics.median(per_gang.values()), 3) if per_gang else None,
        "apply_to_last_bound_s": round(last, 3),
        "pods_per_second": round(bound_pods / last, 1) if last else None,
        "mean_comm_ms": round(statistics.mean(comm), 3) if comm else None,
        "mean_step_ms": round(statistics.mean(steps), 3) if steps else None,
        "costs_ms": {n: round(costs[n], 4) for n in placed if n in costs},
    }


class Contender:
    """How one scheduler is given the gangs, which label marks a gang's pods, and where each gang landed."""

    def __init__(self, kube: Kube, name: str, namespace: str, key: str) -> None:
        self.kube, self.name, self.namespace, self.key = kube, name, namespace, key

    async def submit(self, gangs: list[Gang]) -> None:
        raise NotImplementedError

    async def nodes_of(self, gang: Gang, tracker: PodTracker) -> list[str] | None:
        """The node of each TP group ``d * pp + p``, or None when the gang is not placed whole."""
        raise NotImplementedError

    async def clear(self, tracker: PodTracker) -> None:
        raise NotImplementedError


class KubeScheduler(Contender):
    # A deleted PodGroup lingers while the PodGroup protection controller waits for its pods to go (a
    # finalizer): each submission names its groups and pods afresh rather than wait for that.
    submissions = 0

    def _group(self, gang: Gang) -> str:
        return f"{gang.name}-s{self.submissions}"

    async def submit(self, gangs: list[Gang]) -> None:
        self.submissions += 1
        ns = self.namespace
        path = f"/apis/{SCHEDULING_GROUP}/{kubeline.selected().gang_api_version}/namespaces/{ns}/podgroups"
        groups = [{**pod_group(ns, g), "metadata": {"name": self._group(g), "namespace": ns}} for g in gangs]
        await gather_limited([self.kube.request("POST", path, group) for group in groups])
        pods = []
        for gang in gangs:
            for d in range(gang.dp):
                for p in range(gang.pp):
                    body = _pod(ns, f"{self._group(gang)}-d{d}-p{p}", gang.tp, {GANG_LABEL: gang.name})
                    body["spec"]["schedulingGroup"] = {"podGroupName": self._group(gang)}
                    pods.append(self.kube.request("POST", pod_path(ns), body))
        await gather_limited(pods)

    async def nodes_of(self, gang: Gang, tracker: PodTracker) -> list[str] | None:
        names = {p["name"]: p["node"] for p in tracker.pods.values() if p["labels"].get(GANG_LABEL) == gang.name}
        group = self._group(gang)
        order = [names.get(f"{group}-d{d}-p{p}") or "" for d in range(gang.dp) for p in range(gang.pp)]
        return order if all(order) else None

    async def clear(self, tracker: PodTracker) -> None:
        ns = self.namespace
        version = kubeline.selected().gang_api_version
        await self.kube.request("DELETE", f"/apis/{SCHEDULING_GROUP}/{version}/namespaces/{ns}/podgroups")
        await self.kube.request("DELETE", pod_path(ns), {"gracePeriodSeconds": 0})
        await tracker.wait(lambda: not tracker.pods, 300)


class Ours(Contender):
    async def submit(self, gangs: list[Gang]) -> None:
        await gather_limited([self.kube.request("POST", job_path(self.namespace), job_manifest(g)) for g in gangs])

    async def nodes_of(self, gang: Gang, tracker: PodTracker) -> list[str] | None:
        status = (await self.kube.request("GET", job_path(self.namespace, gang.name))).get("status") or {}
        placed = (status.get("placement") or {}).get("pods") or []
        bound = {p["name"] for p in tracker.pods.values() if p["labels"].get(JOB_LABEL) == gang.name and p["node"]}
        if len(placed) != gang.pods or len(bound) != gang.pods:
            return None
        nodes = {(p["replica"], p["stage"]): p["node"] for p in placed}
        return [nodes[(d, p)] for d in range(gang.dp) for p in range(gang.pp)]

    async def clear(self, tracker: PodTracker) -> None:
        await self.kube.request("DELETE", job_path(self.namespace))
        await tracker.wait(lambda: not tracker.pods, 300)


async def contend(contender: Contender, gangs: list[Gang], view: Any, jobs: dict[str, Any]) -> dict[str, Any]:
    """Every gang at once: who gets placed, how fast, at what cost, and who is left half-bound."""
    total = sum(g.pods for g in gangs)
    async with PodTracker(contender.kube, contender.namespace) as tracker:
        started = time.monotonic()
        await contender.submit(gangs)
        await settle(tracker, total, started, 240.0)
        costs = {}
        for gang in gangs:
            order = await contender.nodes_of(gang, tracker)
            if order is not None:
                costs[gang.name] = placement_cost(view.topology, view.node_index, jobs[gang.name].spec,
                                                  gang.cost_model, order)  # fmt: skip
        out = _summary(gangs, tracker, started, contender.key, costs, {n: j.spec for n, j in jobs.items()})
        await contender.clear(tracker)
    return out


async def alone(
    contender: Contender, gangs: list[Gang], view: Any, jobs: dict[str, Any], keep_alive: Any = None
) -> dict[str, Any]:
    """Each gang by itself on the background: the placement each scheduler chooses for the same state.
    ``keep_alive`` is called before each gang (the operator restarted if it stepped down)."""
    costs: dict[str, float] = {}
    refused: list[str] = []
    async with PodTracker(contender.kube, contender.namespace) as tracker:
        for gang in gangs:
            if keep_alive is not None:
                keep_alive()
            await contender.submit([gang])
            with contextlib.suppress(TimeoutError):
                await tracker.wait(lambda gang=gang: len(tracker.bound()) == gang.pods, 8.0)  # type: ignore[misc]
            order = await contender.nodes_of(gang, tracker) if len(tracker.bound()) == gang.pods else None
            if order is None:
                refused.append(gang.name)
            else:
                costs[gang.name] = placement_cost(view.topology, view.node_index, jobs[gang.name].spec,
                                                  gang.cost_model, order)  # fmt: skip
            await contender.clear(tracker)
    return {"placed": len(costs), "refused": refused, "costs_ms": {n: round(c, 4) for n, c in costs.items()}}


async def measure(cluster: DevCluster, nodes: int, gang_count: int, seed: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-native-"))
    kube = await Kube.connect(str(cluster.kubeconfig))
    # fair share with backfill: under strict FIFO (the default) a gang that cannot be placed holds every gang
    # behind it in its queue, which kube-scheduler never does; the comparison is of placement, not of queueing
    # A 60 s lease: on the shared 2-core machine, kube-scheduler's round and the pod storms starve the API
    # server long enough that the default 15 s lease was not renewed and the operator stepped down mid-round.
    operator = OperatorProcess(
        cluster.kubeconfig, workdir, identity="bench-native", lease_seconds=LEASE_S, log_level="WARNING",
        log_name="{identity}-{start}.log", extra_args=("--queue-policy", QUEUE_POLICY),
    )  # fmt: skip
    operator.start()
    try:
        used = background(nodes, NODES_PER_RACK, 0.5, seed)
        await fill(kube, cluster.shape, used)
        config = TopologyConfig()
        items, _ = await kube.list("/api/v1/nodes")
        view = build_view([parse_node(b, config) for b in items], [], [], config)
        gangs = llm_set(gang_count, NODES_PER_RACK * 8, seed)
        jobs: dict[str, Any] = {}
        for gang in gangs:
            body = {**job_manifest(gang), "metadata": {"name": gang.name, "namespace": "bench", "uid": "u"}}
            request = parse_job(body).request
            assert request is not None, f"the benchmark's own ParallelJob {gang.name} does not parse"
            jobs[gang.name] = request
        await operator.wait_metric("paralleljob_reconcile_passes_total", 1.0)
        await asyncio.sleep(3.0)
        print(f"{nodes} nodes: background {sum(used.values())} GPUs used; {len(gangs)} gangs", file=sys.stderr)
        for ns in ("bench-native-ks", "bench-native-pj"):
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        contenders = {
            "kube_scheduler": KubeScheduler(kube, "kube-scheduler", "bench-native-ks", GANG_LABEL),
            "ours": Ours(kube, "paralleljob", "bench-native-pj", JOB_LABEL),
        }
        runs: dict[str, dict[str, Any]] = {}
        for who, contender in contenders.items():
            operator.ensure_running()
            runs[who] = await contend(contender, gangs, view, jobs)
            print(f"{nodes} nodes {who} contended: {runs[who]['placed']}/{len(gangs)}", file=sys.stderr, flush=True)
        for who, contender in contenders.items():
            operator.ensure_running()
            runs[f"{who}_alone"] = await alone(contender, gangs, view, jobs, operator.ensure_running)
            print(f"{nodes} nodes {who} alone: {runs[f'{who}_alone']['placed']}", file=sys.stderr, flush=True)
        return {
            "nodes": nodes,
            "background_gpus_used": sum(used.values()),
            "gangs": [{"name": g.name, "shape": g.shape, "cost_model": g.cost_model, "pods": g.pods} for g in gangs],
            **runs,
            "compare": compare(gangs, runs, {n: j.spec for n, j in jobs.items()}),
            "operator_starts": operator.starts,  # > 1: it stepped down (lease not renewed) and was restarted
        }
    finally:
        await kube.close()
        operator.stop()


def run_native(sizes: list[int], gang_count: int, seed: int) -> dict[str, Any]:
    results = []
    for nodes in sizes:
        name = f"native-{os.getpid()}-{nodes}"
        shape = NodeShape(count=nodes, gpus_per_node=8, nodes_per_rack=NODES_PER_RACK)
        started = time.monotonic()
        cluster = up(name, shape, die_with_caller=True, kube_scheduler=True)
        up_s = round(time.monotonic() - started, 1)
        try:
            result = asyncio.run(measure(cluster, nodes, gang_count, seed))
            result["cluster_up_s"] = up_s
            results.append(result)
        finally:
            down(name)
    return {"sizes": results}

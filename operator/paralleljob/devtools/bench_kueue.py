"""``paralleljob bench kueue``: placement of the native benchmark's mixed LLM set through Kueue's Topology
Aware Scheduling next to ParallelJobs of the same shapes, in one run on one cluster (issue 41, placement).

One dev cluster of kwok nodes (8 GPUs, ``NODES_PER_RACK`` a rack) with JobSet, Kueue (TAS on, its defaults;
``devcluster/kueue.py``) and the stock kube-scheduler beside the operator, and a half-full background of
pre-bound pods (one per node, not Kueue's, which TAS counts as used as kube-scheduler does), made once
before any side runs: ``packed`` is ``bench native``'s (``native_set.background``), ``churned`` the same
jobs filled higher and thinned by departures (``native_set.churned_background``: free GPUs on every
rack). Kueue is configured as its TAS docs show: a Topology over the rack label and
``kubernetes.io/hostname``, a ResourceFlavor with that ``topologyName`` on the GPU nodes, one ClusterQueue
whose quota is every GPU (quota is never what refuses a gang: the comparison is of placement) and a
LocalQueue per Kueue namespace. A gang TP x PP x DP is a JobSet of one replicated Job, Indexed, of PP x DP
pods asking TP GPUs each, labelled with the queue and with ``podset-required-topology`` on the rack (or, in
the second Kueue run, ``podset-preferred-topology``); its pod of completion index r is node rank r,
in Megatron-LM's default rank order (``tp-dp-pp``: replica d of stage p is rank ``p * DP + d``), which is
also our own default for pod groups (``core/rankorder.py``).

The gangs: the mixed LLM set (each at most a rack) and ``beyond_rack``'s, larger than any rack's free GPUs.
Each gang is submitted alone on the background, to each in turn, and removed before the next (the
placement each chooses for the same state): placed or not, apply -> every pod bound, and for a placed gang
its communication cost under our cost model on the operator's own view of the nodes and the step time of
the simulator's step-time model.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paralleljob.core.rankorder import DEFAULT_RANK_ORDER, slot_of
from paralleljob.devcluster.cluster import DevCluster, down, up
from paralleljob.devcluster.nodes import DEV_CLUSTER_LABEL, LEAF_LABEL, NodeShape
from paralleljob.devtools.bench_identity import queued_operator_kubeconfig
from paralleljob.devtools.bench_kit import PodTracker
from paralleljob.devtools.bench_native import GANG_LABEL, KWOK_TOLERATION, Contender, Ours, fill, job_manifest
from paralleljob.devtools.kueue_report import compare
from paralleljob.devtools.native_set import BACKGROUNDS, COST_MODELS, Gang, llm_set, placement_cost, step_ms
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import GPU_RESOURCE, JOB_LABEL
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.runtime.api import ApiError, Kube, pod_path

NODES_PER_RACK = 32
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"
QUEUE = "bench"
HOSTNAME = "kubernetes.io/hostname"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
BOUND_WAIT_S = 60.0  # a gang not whole after this is counted as not placed


def _kueue(kind: str, name: str, spec: dict[str, Any], namespace: str = "") -> tuple[str, dict[str, Any]]:
    """(collection path, body) of one Kueue object."""
    plural = {"Topology": "topologies"}.get(kind, f"{kind.lower()}s")
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    path = f"{KUEUE_API}/namespaces/{namespace}/{plural}" if namespace else f"{KUEUE_API}/{plural}"
    return path, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": metadata, "spec": spec}


def kueue_objects(namespaces: list[str], gpus: int) -> list[tuple[str, dict[str, Any]]]:
    """The Topology, TAS ResourceFlavor, ClusterQueue and a LocalQueue per namespace, in creation order."""
    quota = [{"name": GPU_RESOURCE, "nominalQuota": str(gpus)}]
    groups = [{"coveredResources": [GPU_RESOURCE], "flavors": [{"name": "gpus", "resources": quota}]}]
    return [
        _kueue("Topology", "racks", {"levels": [{"nodeLabel": LEAF_LABEL}, {"nodeLabel": HOSTNAME}]}),
        _kueue("ResourceFlavor", "gpus", {"nodeLabels": {DEV_CLUSTER_LABEL: "true"}, "topologyName": "racks"}),
        _kueue("ClusterQueue", QUEUE, {"namespaceSelector": {}, "resourceGroups": groups}),
        *(_kueue("LocalQueue", QUEUE, {"clusterQueue": QUEUE}, namespace) for namespace in namespaces),
    ]


def jobset_manifest(
    gang: Gang, name: str, topology: str = REQUIRED_TOPOLOGY, restart_whole: bool = False
) -> dict[str, Any]:
    """The gang as one Indexed Job of a JobSet. ``restart_whole``: as JobSet's own examples configure
    training (``backoffLimit: 0`` as in its PyTorch examples, so a lost pod fails its Job, and
    ``failurePolicy.maxRestarts`` as in its failure-policy examples, so the JobSet recreates every child Job
    instead of failing); otherwise the Job's default back-off limit lets it recreate only the lost pod."""
    resources = {GPU_RESOURCE: str(gang.tp)}
    template = {
        "metadata": {"labels": {GANG_LABEL: gang.name}, "annotations": {topology: LEAF_LABEL}},
        "spec": {
            "restartPolicy": "Never",
            "tolerations": [KWOK_TOLERATION],
            "containers": [
                {"name": "c", "image": "bench:1", "resources": {"requests": resources, "limits": resources}}
            ],
        },
    }
    job: dict[str, Any] = {
        "completionMode": "Indexed", "parallelism": gang.pods, "completions": gang.pods, "template": template
    }  # fmt: skip
    spec: dict[str, Any] = {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}]}
    if restart_whole:
        job["backoffLimit"] = 0
        spec["failurePolicy"] = {"maxRestarts": 3}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": spec,
    }


class KueueTAS(Contender):
    submissions = 0  # each submission names its JobSet afresh: a deleted one's Workload may linger a moment
    topology = REQUIRED_TOPOLOGY
    restart_whole = False

    async def submit(self, gangs: list[Gang]) -> None:
        self.submissions += 1
        path = f"{JOBSET_API}/namespaces/{self.namespace}/jobsets"
        for gang in gangs:
            body = jobset_manifest(gang, f"{gang.name}-s{self.submissions}", self.topology, self.restart_whole)
            await self.kube.request("POST", path, body)

    async def nodes_of(self, gang: Gang, tracker: PodTracker) -> list[str] | None:
        """The pod of completion index r is node rank r, read in Megatron's default order (tp-dp-pp), as a
        JobSet user's launcher would; TP group ``d * pp + p`` is then the pod of rank ``p * dp + d``."""
        pods = [p for p in tracker.pods.values() if p["labels"].get(GANG_LABEL) == gang.name and p["node"]]
        by_rank = {int(p["labels"][COMPLETION_INDEX]): p["node"] for p in pods if COMPLETION_INDEX in p["labels"]}
        if len(by_rank) != gang.pods:
            return None
        order = [""] * gang.pods
        for rank, node in by_rank.items():
            replica, stage = slot_of(DEFAULT_RANK_ORDER, rank, gang.pp, gang.dp)
            order[replica * gang.pp + stage] = node
        return order

    async def clear(self, tracker: PodTracker) -> None:
        """Everything of the gang gone, its Workload included: TAS counts an admitted Workload's assignment
        as used on its nodes until the Workload goes, which would skew the next gang's placement."""
        ns, background = self.namespace, {"propagationPolicy": "Background"}
        await self.kube.request("DELETE", f"{JOBSET_API}/namespaces/{ns}/jobsets", background)
        await self.kube.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs", background)
        await self.kube.request("DELETE", pod_path(ns), {"gracePeriodSeconds": 0})
        await tracker.wait(lambda: not tracker.pods, 300)
        deadline = time.monotonic() + 300
        while (await self.kube.list(f"{KUEUE_API}/namespaces/{ns}/workloads"))[0]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kueue's Workloads in {ns} still there after 300 s")
            await asyncio.sleep(0.2)


class KueuePreferred(KueueTAS):
    topology = PREFERRED_TOPOLOGY


async def one_by_one(contender: Contender, gangs: list[Gang], view: Any, jobs: dict[str, Any],
                     keep_alive: Any) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Each gang by itself on the background: placed or not, apply -> bound, cost and step time."""
    out: dict[str, dict[str, Any]] = {}
    async with PodTracker(contender.kube, contender.namespace) as tracker:
        for gang in gangs:
            keep_alive()
            started = time.monotonic()
            await contender.submit([gang])
            with contextlib.suppress(TimeoutError):
                await tracker.wait(lambda gang=gang: len(tracker.bound()) == gang.pods, BOUND_WAIT_S)  # type: ignore[misc]
            order = await contender.nodes_of(gang, tracker) if len(tracker.bound()) == gang.pods else None
            row: dict[str, Any] = {"placed": order is not None}
            if order is not None:
                spec = jobs[gang.name].spec
                cost = placement_cost(view.topology, view.node_index, spec, gang.cost_model, order)
                row.update(
                    comm_ms=round(cost, 4), step_ms=round(step_ms(spec, cost), 3),
                    apply_to_bound_s=round(max(tracker.bound_at[u] for u in tracker.bound()) - started, 3),
                    nodes=order,  # TP group d * pp + p's node: where each side put the ranks
                )  # fmt: skip
            out[gang.name] = row
            await contender.clear(tracker)
    return out


def rack_free(used: dict[int, int], nodes: int) -> list[int]:
    """Free GPUs of each rack once the background holds ``used`` (GPUs per node index)."""
    racks = (nodes + NODES_PER_RACK - 1) // NODES_PER_RACK
    free = [0] * racks
    for node in range(nodes):
        free[node // NODES_PER_RACK] += 8 - used.get(node, 0)
    return free


def beyond_rack(count: int, free: list[int], seed: int) -> list[Gang]:
    """``count`` gangs larger than any rack's free GPUs and at most three quarters of all free ones, of TP 2
    or 4 so they fit the background's fragments: a required rack can never hold them, a preferred one lets
    Kueue spread them, and ParallelJobs span racks. None when no shape fits between those bounds (the
    background packs some racks full and leaves others empty, so on two racks there is no such gang)."""
    low, high = max(free), sum(free) * 3 // 4
    shapes = [
        (tp, pp, dp)
        for tp in (2, 4)
        for pp in (1, 2, 4, 8)
        for dp in (4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64)
        if low < tp * pp * dp <= high and pp * dp <= 128
    ]
    rng = random.Random(seed)
    picked = [rng.choice(shapes) for _ in range(count)] if shapes else []
    return [Gang(f"b{i:02d}", tp, pp, dp, COST_MODELS[i % 2]) for i, (tp, pp, dp) in enumerate(picked)]


async def measure(
    cluster: DevCluster, nodes: int, gang_count: int, big_count: int, seed: int, background: str = "packed"
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-kueue-"))
    kube = await Kube.connect(str(cluster.kubeconfig))
    operator_kubeconfig = await queued_operator_kubeconfig(kube, cluster)
    operator = OperatorProcess(
        operator_kubeconfig, workdir, identity="bench-kueue", lease_seconds=60.0, log_level="WARNING",
        log_name="{identity}-{start}.log",
    )  # fmt: skip
    operator.start()
    try:
        used = BACKGROUNDS[background](nodes, NODES_PER_RACK, 0.5, seed)
        await fill(kube, cluster.shape, used)  # once, before any side: all three see the same pods
        config = TopologyConfig()
        items, _ = await kube.list("/api/v1/nodes")
        view = build_view_of(items, config)
        free = rack_free(used, nodes)
        gangs = llm_set(gang_count, NODES_PER_RACK * 8, seed) + beyond_rack(big_count, free, seed)
        jobs: dict[str, Any] = {}
        for gang in gangs:
            body = {**job_manifest(gang), "metadata": {"name": gang.name, "namespace": "bench", "uid": "u"}}
            jobs[gang.name] = parse_job(body).request
        contenders = {
            "kueue_required": KueueTAS(kube, "kueue-required", "bench-kueue-req", GANG_LABEL),
            "kueue_preferred": KueuePreferred(kube, "kueue-preferred", "bench-kueue-pref", GANG_LABEL),
            "ours": Ours(kube, "paralleljob", "bench-kueue-pj", JOB_LABEL),
        }
        for contender in contenders.values():
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": contender.namespace}})
        kueue_namespaces = [c.namespace for c in contenders.values() if isinstance(c, KueueTAS)]
        for path, body in kueue_objects(kueue_namespaces, nodes * 8):
            await kube.request("POST", path, body)
        await operator.wait_metric("paralleljob_reconcile_passes_total", 1.0)
        print(f"{nodes} nodes: {background} background, {sum(used.values())} GPUs used, {free} free a rack;"
              f" {len(gangs)} gangs", file=sys.stderr)  # fmt: skip
        runs = {}
        for who, contender in contenders.items():
            runs[who] = await one_by_one(contender, gangs, view, jobs, operator.ensure_running)
            print(f"{who}: {sum(r['placed'] for r in runs[who].values())} placed", file=sys.stderr, flush=True)
        return {
            "nodes": nodes,
            "background": background,
            "background_gpus_used": sum(used.values()),
            "free_gpus_per_rack": free,
            "gangs": [
                {"name": g.name, "shape": g.shape, "gpus": g.gpus, "cost_model": g.cost_model, "pods": g.pods}
                for g in gangs
            ],
            **runs,
            "compare": compare(gangs, runs),
            "operator_starts": operator.starts,
        }
    finally:
        await kube.close()
        operator.stop()


def build_view_of(items: list[dict[str, Any]], config: TopologyConfig) -> Any:
    from paralleljob.k8s.view.clusterview import build_view

    return build_view([parse_node(b, config) for b in items], [], [], config)


def run_kueue(nodes: int, gang_count: int, big_count: int, seed: int, background: str = "packed") -> dict[str, Any]:
    name = f"kueue-{os.getpid()}-{nodes}"
    shape = NodeShape(count=nodes, gpus_per_node=8, nodes_per_rack=NODES_PER_RACK)
    started = time.monotonic()
    cluster = up(name, shape, die_with_caller=True, controllers=("jobset", "kueue"))
    up_s = round(time.monotonic() - started, 1)
    try:
        result = asyncio.run(measure(cluster, nodes, gang_count, big_count, seed, background))
        result["cluster_up_s"] = up_s
        return result
    finally:
        down(name)

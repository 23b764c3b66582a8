"""``paralleljob bench kueue --kueue-nvl72 RACKS``: the placement comparison with Kueue's Topology Aware
Scheduling on GB200 NVL72 racks (issue 41's NVL72 variant), in one run on one cluster.

One dev cluster of ``RACKS`` NVL72 racks (``dev-cluster up --nvl72-racks``: 18 kwok trays of 4 GPUs each,
``nvidia.com/gpu.clique`` the same on every tray of a rack, one leaf per rack, two racks a spine; no HGX
node; the ComputeDomain CRD and the stand-in for its controller) with JobSet, Kueue (TAS on, its defaults)
and the stock kube-scheduler beside the operator. The background is ``nvl72_kueue_set.tray_background``
(half the GPUs, one pre-bound pod per tray, which TAS counts as used as kube-scheduler does).

Kueue is configured as its TAS docs and the GB200 guides show: a Topology with the levels spine (the block
above the NVLink domain), ``nvidia.com/gpu.clique`` and ``kubernetes.io/hostname``, a ResourceFlavor with that
``topologyName`` selecting the GB200 trays, one ClusterQueue whose quota is every GPU and a LocalQueue per
Kueue namespace. A gang TP x PP x DP is a JobSet of one replicated Job, Indexed, of one pod per tray (4
GPUs, requests = limits), pod index = node rank (``nvl72_kueue_set``), in three variants: the clique
required (``podset-required-topology``), the clique preferred (``podset-preferred-topology``), and the clique
preferred with each TP group of a gang spanning trays a slice required inside one clique
(``podset-slice-required-topology`` on the clique, ``podset-slice-size`` = TP / 4: how a Kueue user tells it
the TP groups). To us it is a ParallelJob of that shape and cost model. Each gang is submitted alone on the
background to each in turn and removed before the next; a gang not whole after ``BOUND_WAIT_S`` is "not
placed", with the Workload's (or the job's) last condition as the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paralleljob.devcluster.cluster import DevCluster, down, up
from paralleljob.devcluster.nodes import SPINE_LABEL, NodeShape
from paralleljob.devcluster.nvl72 import PRODUCT, tray_shape
from paralleljob.devtools.bench_identity import queued_operator_kubeconfig
from paralleljob.devtools.bench_kit import PodTracker
from paralleljob.devtools.bench_kueue import (
    COMPLETION_INDEX,
    HOSTNAME,
    JOBSET_API,
    KUEUE_API,
    PREFERRED_TOPOLOGY,
    QUEUE,
    REQUIRED_TOPOLOGY,
    KueueTAS,
    _kueue,
    build_view_of,
)
from paralleljob.devtools.bench_native import GANG_LABEL, KWOK_TOLERATION, Ours, fill, job_manifest
from paralleljob.devtools.kueue_nvl72_report import compare
from paralleljob.devtools.native_set import Gang, step_ms
from paralleljob.devtools.nvl72_kueue_set import (
    TRAY_GPUS,
    beyond_clique,
    clique_fit,
    free_trays,
    groups_from_ranks,
    nvl72_gangs,
    ranks_from_status,
    tray_background,
    tray_cost,
    tray_pods,
    trays_per_group,
)
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import GPU_RESOURCE, JOB_LABEL
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.computedomain import CLIQUE_LABEL
from paralleljob.k8s.plan.admission.trayadmission import nvlink_topology
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path

SLICE_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
BOUND_WAIT_S = 30.0  # a gang not whole after this is counted as not placed (Kueue admits in 1-4 s here)
TOPOLOGY_LEVELS = (SPINE_LABEL, CLIQUE_LABEL, HOSTNAME)


def tray_kueue_objects(namespaces: list[str], gpus: int) -> list[tuple[str, dict[str, Any]]]:
    """The Topology over spine, clique and hostname, the TAS ResourceFlavor of the GB200 trays, the
    ClusterQueue (every GPU) and a LocalQueue per namespace, in creation order."""
    quota = [{"name": GPU_RESOURCE, "nominalQuota": str(gpus)}]
    groups = [{"coveredResources": [GPU_RESOURCE], "flavors": [{"name": "trays", "resources": quota}]}]
    levels = [{"nodeLabel": label} for label in TOPOLOGY_LEVELS]
    return [
        _kueue("Topology", "cliques", {"levels": levels}),
        _kueue(
            "ResourceFlavor", "trays", {"nodeLabels": {"nvidia.com/gpu.product": PRODUCT}, "topologyName": "cliques"}
        ),
        _kueue("ClusterQueue", QUEUE, {"namespaceSelector": {}, "resourceGroups": groups}),
        *(_kueue("LocalQueue", QUEUE, {"clusterQueue": QUEUE}, namespace) for namespace in namespaces),
    ]


def variant_annotations(variant: str, gang: Gang) -> dict[str, str]:
    """The pod template's TAS annotations of one Kueue variant (``required``, ``preferred``, ``sliced``)."""
    if variant == "required":
        return {REQUIRED_TOPOLOGY: CLIQUE_LABEL}
    out = {PREFERRED_TOPOLOGY: CLIQUE_LABEL}
    if variant == "sliced" and trays_per_group(gang) > 1:
        out |= {SLICE_TOPOLOGY: CLIQUE_LABEL, SLICE_SIZE: str(trays_per_group(gang))}
    return out


def tray_jobset_manifest(gang: Gang, name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """One replicated Job, Indexed, of one 4-GPU pod per tray; the completion index is the node rank."""
    resources = {GPU_RESOURCE: str(TRAY_GPUS)}
    template = {
        "metadata": {"labels": {GANG_LABEL: gang.name}, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "tolerations": [KWOK_TOLERATION],
            "containers": [
                {"name": "c", "image": "bench:1", "resources": {"requests": resources, "limits": resources}}
            ],
        },
    }
    pods = tray_pods(gang)
    job = {"completionMode": "Indexed", "parallelism": pods, "completions": pods, "template": template}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}]},
    }


def tray_job_manifest(gang: Gang) -> dict[str, Any]:
    body = job_manifest(gang)
    body["spec"]["gpuProduct"] = PRODUCT
    return body


class KueueTrays(KueueTAS):
    variant = "required"

    async def submit(self, gangs: list[Gang]) -> None:
        self.submissions += 1
        path = f"{JOBSET_API}/namespaces/{self.namespace}/jobsets"
        for gang in gangs:
            body = tray_jobset_manifest(
                gang, f"{gang.name}-s{self.submissions}", variant_annotations(self.variant, gang)
            )
            await self.kube.request("POST", path, body)

    async def groups_of(self, gang: Gang, tracker: PodTracker) -> list[list[str]] | None:
        pods = [p for p in tracker.pods.values() if p["labels"].get(GANG_LABEL) == gang.name and p["node"]]
        ranks = {int(p["labels"][COMPLETION_INDEX]): p["node"] for p in pods if COMPLETION_INDEX in p["labels"]}
        return groups_from_ranks(gang, ranks)

    async def why_not(self) -> str:
        items, _ = await self.kube.list(f"{KUEUE_API}/namespaces/{self.namespace}/workloads")
        conditions = [c for i in items for c in (i.get("status") or {}).get("conditions") or []]
        return "; ".join(f"{c.get('type')}={c.get('status')}: {c.get('message', '')}" for c in conditions)[:300]


class KueueTraysPreferred(KueueTrays):
    variant = "preferred"


class KueueTraysSliced(KueueTrays):
    variant = "sliced"


class OursTrays(Ours):
    async def submit(self, gangs: list[Gang]) -> None:
        for gang in gangs:
            await self.kube.request("POST", job_path(self.namespace), tray_job_manifest(gang))

    async def groups_of(self, gang: Gang, tracker: PodTracker) -> list[list[str]] | None:
        status = (await self.kube.request("GET", job_path(self.namespace, gang.name))).get("status") or {}
        if len(tracker.bound(gang.name)) != tray_pods(gang):
            return None
        return groups_from_ranks(gang, ranks_from_status(gang, status.get("placement") or {}))

    async def why_not(self) -> str:
        items, _ = await self.kube.list(job_path(self.namespace))
        conditions = [c for i in items for c in (i.get("status") or {}).get("conditions") or []]
        return "; ".join(f"{c.get('type')}={c.get('status')}: {c.get('message', '')}" for c in conditions)[:300]


async def one_by_one(
    contender: KueueTrays | OursTrays, gangs: list[Gang], score: Callable[[Gang, list[list[str]]], dict[str, Any]],
    keep_alive: Callable[[], None],
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Each gang by itself on the background: placed or not (and why), apply -> bound, cost, step time and
    how its TP groups sit in the cliques (each TP group's trays, in the JSON)."""
    out: dict[str, dict[str, Any]] = {}
    async with PodTracker(contender.kube, contender.namespace) as tracker:
        for gang in gangs:
            keep_alive()
            started, total = time.monotonic(), tray_pods(gang)
            await contender.submit([gang])
            with contextlib.suppress(TimeoutError):
                await tracker.wait(lambda total=total: len(tracker.bound()) == total, BOUND_WAIT_S)  # type: ignore[misc]
            groups = await contender.groups_of(gang, tracker) if len(tracker.bound()) == total else None
            row: dict[str, Any] = {"placed": groups is not None}
            if groups is None:
                row["reason"] = await contender.why_not()
            else:
                row |= score(gang, groups) | {"trays": groups}
                row["apply_to_bound_s"] = round(max(tracker.bound_at[u] for u in tracker.bound()) - started, 3)
            out[gang.name] = row
            await contender.clear(tracker)
    return out


async def measure(cluster: DevCluster, racks: int, gang_count: int, big_count: int, seed: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-kueue-nvl72-"))
    kube = await Kube.connect(str(cluster.kubeconfig))
    operator_kubeconfig = await queued_operator_kubeconfig(kube, cluster)
    operator = OperatorProcess(
        operator_kubeconfig, workdir, identity="bench-kueue-nvl72", lease_seconds=60.0, log_level="WARNING",
        log_name="{identity}-{start}.log",
    )  # fmt: skip
    operator.start()
    try:
        used = tray_background(racks, 0.5, seed)
        await fill(kube, tray_shape(racks, "device-plugin"), used)
        items, _ = await kube.list("/api/v1/nodes")
        view = build_view_of(items, TopologyConfig())
        nvlink = nvlink_topology(view)
        assert nvlink is not None, "the trays' clique label did not make NVLink cliques in the operator's view"
        clique_of = {i["metadata"]["name"]: i["metadata"]["labels"].get(CLIQUE_LABEL, "") for i in items}
        free = free_trays(used, racks)
        gangs = nvl72_gangs(gang_count, seed) + beyond_clique(big_count, free, seed)
        specs = {}
        for gang in gangs:
            body = {**tray_job_manifest(gang), "metadata": {"name": gang.name, "namespace": "bench", "uid": "u"}}
            request = parse_job(body).request
            assert request is not None, f"the benchmark's own ParallelJob {gang.name} does not parse"
            specs[gang.name] = request.spec

        def score(gang: Gang, groups: list[list[str]]) -> dict[str, Any]:
            spec = specs[gang.name]
            cost = tray_cost(view.topology, nvlink, view.node_index, spec, gang.cost_model, groups)
            return {
                "comm_ms": round(cost, 4),
                "step_ms": round(step_ms(spec, cost), 3),
                **clique_fit(groups, clique_of),
            }

        contenders: dict[str, KueueTrays | OursTrays] = {
            "kueue_required": KueueTrays(kube, "kueue-required", "nvl-kueue-req", GANG_LABEL),
            "kueue_preferred": KueueTraysPreferred(kube, "kueue-preferred", "nvl-kueue-pref", GANG_LABEL),
            "kueue_sliced": KueueTraysSliced(kube, "kueue-sliced", "nvl-kueue-slice", GANG_LABEL),
            "ours": OursTrays(kube, "paralleljob", "nvl-pj", JOB_LABEL),
        }
        for contender in contenders.values():
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": contender.namespace}})
        kueue_namespaces = [c.namespace for c in contenders.values() if isinstance(c, KueueTrays)]
        for path, body in tray_kueue_objects(kueue_namespaces, racks * 72):
            await kube.request("POST", path, body)
        await operator.wait_metric("paralleljob_reconcile_passes_total", 1.0)
        print(f"{racks} racks: background {sum(used.values())} GPUs used, whole free trays per clique {free};"
              f" {len(gangs)} gangs", file=sys.stderr, flush=True)  # fmt: skip
        runs, load_start = {}, os.getloadavg()
        for who, contender in contenders.items():
            runs[who] = await one_by_one(contender, gangs, score, operator.ensure_running)
            print(f"{who}: {sum(r['placed'] for r in runs[who].values())} placed", file=sys.stderr, flush=True)
        return {
            "racks": racks,
            "background_gpus_used": sum(used.values()),
            "whole_free_trays_per_clique": free,
            "kueue_topology_levels": list(TOPOLOGY_LEVELS),
            "gangs": [
                {"name": g.name, "shape": g.shape, "gpus": g.gpus, "cost_model": g.cost_model, "pods": tray_pods(g)}
                for g in gangs
            ],
            **runs,
            "compare": compare(gangs, runs),
            "operator_starts": operator.starts,
            "load_avg_start": load_start,
            "load_avg_end": os.getloadavg(),
        }
    finally:
        await kube.close()
        operator.stop()


def run_kueue_nvl72(racks: int, gang_count: int, big_count: int, seed: int) -> dict[str, Any]:
    name = f"kueue-nvl72-{os.getpid()}-{racks}"
    started = time.monotonic()
    cluster = up(name, NodeShape(count=0), die_with_caller=True, controllers=("jobset", "kueue"), nvl72_racks=racks)
    up_s = round(time.monotonic() - started, 1)
    try:
        result = asyncio.run(measure(cluster, racks, gang_count, big_count, seed))
        result["cluster_up_s"] = up_s
        return result
    finally:
        down(name)

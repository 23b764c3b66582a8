"""Repair (issue 41, item 2): a node of a running gang fails; Kueue's TAS node replacement against our repair,
on the dev cluster ``bench_kueue_parts`` brought up, each side its own samples, one gang at a time.

The gang is TP8 x PP2 x DP2 (four 8-GPU pods), for Kueue a JobSet with ``podset-required-topology`` on the
rack over ``bench_kueue``'s Topology, TAS ResourceFlavor and ClusterQueue, in two configurations: its Job's
default back-off limit (the Job recreates only the lost pod) and the shape JobSet's own examples give
training (``backoffLimit: 0`` as in its PyTorch examples, ``failurePolicy.maxRestarts`` as in its failure-policy
ones: the JobSet recreates every pod); for us a ParallelJob. Kueue
v0.17's replacement gates are all on by default (TASFailedNodeReplacement, ...FailFast,
TASReplaceNodeOnPodTermination, TASReplaceNodeOnNodeTaints), and nothing of its configuration is changed.

The failure, the same for both: kwok turns the node of the gang's first pod NotReady and the gang's pods on
it are deleted at once. The deletion stands in for what the control plane does on a real cluster and this
dev cluster does not run (no node-lifecycle or pod-GC controller): the taint eviction (300 s by default) or
pod GC of a deleted node (40 s quarantine) that a Job's pod needs before its Job makes a new one. Doing it
at once is Kueue's best case: with its pods gone, TASReplaceNodeOnPodTermination marks the node failed
without the 30 s NodeFailureDelay. Measured from the injection to the gang whole again (every pod bound,
none on the failed node), the gang's pods that are new (and when the last of them was first seen, its
creation apart from its binding), and the placement cost before and after, under our model.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from paralleljob.devcluster.chaos import heal_node, make_node_not_ready, wait_node_ready
from paralleljob.devtools.bench_kit import PodTracker
from paralleljob.devtools.bench_kueue import KueueTAS, build_view_of, kueue_objects
from paralleljob.devtools.bench_native import GANG_LABEL, Contender, Ours, job_manifest
from paralleljob.devtools.flow_report import median_or_none
from paralleljob.devtools.native_set import COST_MODELS, Gang, placement_cost
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import JOB_LABEL
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.runtime.api import ApiError, Kube, pod_path

WHOLE_WAIT_S = 180.0  # a gang not whole again after this counts as not repaired


class SeenTracker(PodTracker):
    """Also notes when each pod was first seen at all: a replacement's creation, apart from its binding."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(kube, namespace)
        self.seen_at: dict[str, float] = {}

    def on_event(self, event: dict[str, Any]) -> None:
        uid = ((event.get("object") or {}).get("metadata") or {}).get("uid")
        if uid and uid not in self.seen_at:
            self.seen_at[uid] = time.monotonic()
        super().on_event(event)


def gang_pods(tracker: PodTracker, contender: Contender, gang: Gang) -> dict[str, str | None]:
    """UID -> node of the gang's pods, bound or not."""
    return {uid: p["node"] for uid, p in tracker.pods.items() if p["labels"].get(contender.key) == gang.name}


def whole(pods: dict[str, str | None], gang: Gang, failed: str | None) -> bool:
    return len(pods) == gang.pods and all(node and node != failed for node in pods.values())


async def one_sample(contender: Contender, gang: Gang, view: Any, spec: Any) -> dict[str, Any]:
    kube = contender.kube
    async with SeenTracker(kube, contender.namespace) as tracker:
        await contender.submit([gang])
        await tracker.wait(lambda: whole(gang_pods(tracker, contender, gang), gang, None), 120)
        before = gang_pods(tracker, contender, gang)
        order = await contender.nodes_of(gang, tracker)
        cost_before = (
            round(placement_cost(view.topology, view.node_index, spec, gang.cost_model, order), 4) if order else None
        )
        first = min(before, key=lambda uid: str(tracker.pods[uid]["name"]))
        node = str(before[first])
        doomed = [str(tracker.pods[uid]["name"]) for uid, n in before.items() if n == node]
        started = time.monotonic()
        await make_node_not_ready(kube.api, node)
        for name in doomed:
            with contextlib.suppress(ApiError):
                await kube.request("DELETE", pod_path(contender.namespace, name), {"gracePeriodSeconds": 0})
        row: dict[str, Any] = {"failed_node": node, "pods_on_it": len(doomed), "comm_ms_before": cost_before}
        try:
            await tracker.wait(lambda: whole(gang_pods(tracker, contender, gang), gang, node), WHOLE_WAIT_S)
            row["whole_again_s"] = round(time.monotonic() - started, 2)
            after = gang_pods(tracker, contender, gang)
            new = set(after) - set(before)
            row["pods_restarted"] = len(new)
            seen = [tracker.seen_at[u] for u in new if u in tracker.seen_at]  # a relist after a broken watch: unseen
            row["new_pod_created_s"] = round(max(seen) - started, 2) if seen else None
            order = await contender.nodes_of(gang, tracker)
            if order is not None:
                row["comm_ms_after"] = round(
                    placement_cost(view.topology, view.node_index, spec, gang.cost_model, order), 4
                )
        except TimeoutError:
            row["whole_again_s"] = None
        await contender.clear(tracker)
        await heal_node(kube.api, node)
        await wait_node_ready(kube.api, node)
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r.get("whole_again_s") is not None]
    return {
        "samples": rows,
        "repaired": f"{len(done)}/{len(rows)}",
        "median_whole_again_s": median_or_none([r["whole_again_s"] for r in done]),
        "median_pods_restarted": median_or_none([r["pods_restarted"] for r in done]),
    }


class KueueTASWholeRestart(KueueTAS):
    """The JobSet as its own examples configure training: a lost pod fails the Job and the JobSet recreates
    every pod (``jobset_manifest(restart_whole=True)``)."""

    restart_whole = True


async def repair(kube: Kube, nodes: int, samples: int) -> dict[str, Any]:
    kueue = KueueTAS(kube, "kueue-tas", "bench-repair-kueue", GANG_LABEL)
    whole_restart = KueueTASWholeRestart(kube, "kueue-tas-restart", "bench-repair-kueue-restart", GANG_LABEL)
    ours = Ours(kube, "paralleljob", "bench-repair-pj", JOB_LABEL)
    sides = (("kueue", kueue), ("kueue-whole-restart", whole_restart), ("ours", ours))
    for _, contender in sides:
        with contextlib.suppress(ApiError):
            await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": contender.namespace}})
    for path, body in kueue_objects([kueue.namespace, whole_restart.namespace], nodes * 8):
        await kube.request("POST", path, body)
    items, _ = await kube.list("/api/v1/nodes")
    view = build_view_of(items, TopologyConfig())
    out: dict[str, Any] = {"gang": "TP8 x PP2 x DP2"}
    for who, contender in sides:
        rows = []
        for i in range(samples):
            gang = Gang(f"rep{i:02d}", 8, 2, 2, COST_MODELS[0])
            body = {**job_manifest(gang), "metadata": {"name": gang.name, "namespace": "bench", "uid": "u"}}
            request = parse_job(body).request
            assert request is not None, "the repair gang's own manifest must parse"
            rows.append(await one_sample(contender, gang, view, request.spec))
            await asyncio.sleep(1.0)
        out[who] = summary(rows)
    return out

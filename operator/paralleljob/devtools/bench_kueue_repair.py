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

With ``wave_gangs``, each side is also measured with the failure 1 s into a wave of that many gangs of
``wave_pods`` one-GPU pods created at once on the same side (for Kueue JobSets with the rack as preferred
topology, through the same ClusterQueue; for us ParallelJobs of TP1 x DP ``wave_pods``): whether a repair
waits behind new work that every controller on the path (Kueue, the Job and JobSet controllers,
kube-scheduler; our operator's request lanes) has queued. The wave's pods bound at the failure, when the gang
is whole again and in all say where in the wave the repair landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from paralleljob.devcluster.chaos import heal_node, make_node_not_ready, wait_node_ready
from paralleljob.devtools.bench_kit import PodTracker, Wave
from paralleljob.devtools.bench_kueue import PREFERRED_TOPOLOGY, KueueTAS, build_view_of, jobset_manifest, kueue_objects
from paralleljob.devtools.bench_native import GANG_LABEL, Contender, Ours, gather_limited, job_manifest
from paralleljob.devtools.flow_report import median_or_none
from paralleljob.devtools.native_set import COST_MODELS, Gang, placement_cost
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import JOB_LABEL
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.runtime.api import ApiError, Kube, pod_path

WHOLE_WAIT_S = 180.0  # a gang not whole again after this counts as not repaired
WAVE_WAIT_S = 600.0  # how long the wave is waited for after the repair, to say when it was all bound
WAVE = "wave"  # the wave's gangs are named wave<i>


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


def wave_gangs(count: int, pods: int, sample: int) -> list[Gang]:
    """The wave of one sample, named afresh for each (a deleted JobSet or ParallelJob may linger a moment)."""
    return [Gang(f"{WAVE}{sample:02d}-{i:03d}", 1, 1, pods, COST_MODELS[0]) for i in range(count)]


def wave_bound(tracker: PodTracker, contender: Contender) -> int:
    return sum(
        1 for p in tracker.pods.values() if p["node"] and str(p["labels"].get(contender.key, "")).startswith(WAVE)
    )


async def submit_wave(contender: Contender, wave: list[Gang]) -> None:
    """Every gang of the wave created at once (32 requests in flight, as the other parts submit)."""
    if isinstance(contender, KueueTAS):
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{contender.namespace}/jobsets"
        bodies = [jobset_manifest(g, g.name, PREFERRED_TOPOLOGY, contender.restart_whole) for g in wave]
        await gather_limited([contender.kube.request("POST", path, body) for body in bodies])
    else:
        await contender.submit(wave)


async def one_sample(contender: Contender, gang: Gang, view: Any, spec: Any, wave: list[Gang]) -> dict[str, Any]:
    """One failure of ``gang``'s first node, measured until the gang is whole again; ``wave``: gangs created
    on the same side just before the failure (none: the cluster is otherwise idle)."""
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
        row: dict[str, Any] = {"failed_node": node, "pods_on_it": len(doomed), "comm_ms_before": cost_before}
        if wave:
            wave_started = time.monotonic()
            await submit_wave(contender, wave)
            await asyncio.sleep(Wave.LEAD_S)
            row["wave_pods_bound_at_failure"] = wave_bound(tracker, contender)
        started = time.monotonic()
        await make_node_not_ready(kube.api, node)
        for name in doomed:
            with contextlib.suppress(ApiError):
                await kube.request("DELETE", pod_path(contender.namespace, name), {"gracePeriodSeconds": 0})
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
        if wave:
            row["wave_pods_bound_when_whole"] = wave_bound(tracker, contender)
            total = sum(g.pods for g in wave)
            with contextlib.suppress(TimeoutError):  # a wave not all bound by then says so by its count
                await tracker.wait(lambda: wave_bound(tracker, contender) >= total, WAVE_WAIT_S)
            row["wave_pods_bound"] = wave_bound(tracker, contender)
            row["wave_bound_s"] = round(time.monotonic() - wave_started, 2)
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


async def side_samples(  # params: one side's samples, as ``repair`` sets them
    contender: Contender, view: Any, samples: int, wave_gangs_count: int, wave_pods: int, tag: str
) -> dict[str, Any]:
    rows = []
    for i in range(samples):
        gang = Gang(f"rep{i:02d}{tag}", 8, 2, 2, COST_MODELS[0])
        body = {**job_manifest(gang), "metadata": {"name": gang.name, "namespace": "bench", "uid": "u"}}
        request = parse_job(body).request
        assert request is not None, "the repair gang's own manifest must parse"
        wave = wave_gangs(wave_gangs_count, wave_pods, i)
        rows.append(await one_sample(contender, gang, view, request.spec, wave))
        await asyncio.sleep(1.0)
    return summary(rows)


async def repair(
    kube: Kube, nodes: int, samples: int, wave_gangs_count: int = 0, wave_pods: int = 40
) -> dict[str, Any]:
    """``samples`` failures per side on an idle cluster and, with ``wave_gangs_count``, as many again each in
    a wave of that many gangs of ``wave_pods`` pods (under ``in_wave``)."""
    room = nodes * 8 - 8 * 2 * 2 - 8  # the gang, and one node free for its replacement
    if wave_gangs_count * wave_pods > room:
        raise ValueError(
            f"a wave of {wave_gangs_count} x {wave_pods} GPUs leaves no room for the repair on {nodes} nodes"
        )
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
    if wave_gangs_count:
        out["in_wave"] = {"gangs": wave_gangs_count, "pods_per_gang": wave_pods}
    for who, contender in sides:
        out[who] = await side_samples(contender, view, samples, 0, wave_pods, "")
        if wave_gangs_count:
            out["in_wave"][who] = await side_samples(contender, view, samples, wave_gangs_count, wave_pods, "w")
    return out

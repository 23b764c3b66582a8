"""What the operator benchmarks share (``bench_operator``, ``bench_crash``, ``bench_scale``, ...): a pod
tracker timed by this process's own watch, a ParallelJob body, deleting a namespace's jobs, a wave of gangs
to fail a node in the middle of, and the operator started as a separate process. Its own module so that the
benchmarks import it, not each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.devtools.tracker import WatchTracker
from paralleljob.k8s.edge.config import DEFAULT_WRITE_CONCURRENCY
from paralleljob.k8s.edge.constants import API_VERSION, JOB_LABEL, KIND
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, pod_path


class PodTracker(WatchTracker):
    """Watches one namespace's pods and notes when each pod (by UID) was first seen bound."""

    what = "pod"

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(kube, pod_path(namespace))
        self.namespace = namespace
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> {name, node, labels}
        self.bound_at: dict[str, float] = {}
        self.failed_at: dict[str, float] = {}

    def relisted(self, items: list[dict[str, Any]]) -> None:
        self.pods.clear()
        for pod in items:
            self._apply({"type": "ADDED", "object": pod})

    def on_event(self, event: dict[str, Any]) -> None:
        self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
            return
        pod = event.get("object") or {}
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        if event.get("type") == "DELETED":
            self.pods.pop(uid, None)
        else:
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            labels = meta.get("labels") or {}
            self.pods[uid] = {"name": meta.get("name"), "node": node, "labels": labels, "phase": phase}
            if node and uid not in self.bound_at:
                self.bound_at[uid] = time.monotonic()
            if phase == "Failed" and uid not in self.failed_at:
                self.failed_at[uid] = time.monotonic()
        self.changed.set()

    def bound(self, job: str | None = None) -> list[str]:
        return [u for u, p in self.pods.items() if p["node"] and (job is None or p["labels"].get(JOB_LABEL) == job)]


def job_body(name: str, tp: int, pp: int, dp: int, **spec: Any) -> dict[str, Any]:
    """A ParallelJob of TP ``tp`` x PP ``pp`` x DP ``dp``; ``spec``: more of its spec (e.g. ``gpuProduct``)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "parallelism": {"tensor": tp, "pipeline": pp, "data": dp},
            "failurePolicy": {"maxRestarts": 1000},  # the repair benchmark fails the same job many times
            "template": {"spec": {"containers": [{"name": "trainer", "image": "bench:1"}]}},
            **spec,
        },
    }


@dataclass(frozen=True, slots=True)
class Victim:
    """The running gang a repair benchmark fails a node of: its shape, its pods once placed (a tray job has
    one pod per tray, not per TP group), what else its spec asks and whether it runs on NVL72 trays (its
    replacements then belong in the failed tray's clique)."""

    name: str
    tp: int
    pp: int
    dp: int
    pods: int
    spec: tuple[tuple[str, Any], ...] = ()
    on_trays: bool = False

    def body(self) -> dict[str, Any]:
        return job_body(self.name, self.tp, self.pp, self.dp, **dict(self.spec))


HGX_VICTIM = Victim("victim", 4, 2, 2, pods=4)


async def delete_jobs(kube: Kube, namespace: str, tracker: PodTracker) -> None:
    items, _ = await kube.list(job_path(namespace))
    await asyncio.gather(*(kube.delete(job_path(namespace, i["metadata"]["name"])) for i in items))
    await tracker.wait(lambda: not tracker.pods, 120)


@dataclass(frozen=True, slots=True)
class Wave:
    """``gangs`` ParallelJobs of TP1 x DP ``pods`` created at once in ``namespace`` of their own, to fail a
    node in the middle of: what a repair has to get past when every request lane is full of new work."""

    namespace: str
    gangs: int
    pods: int

    LEAD_S = 1.0  # the failure comes this long after the wave's creates returned

    async def start(self, kube: Kube, sample: int) -> None:
        """Every gang created (named afresh per sample: a deleted job may linger a moment), then the lead."""
        with contextlib.suppress(ApiError):
            await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        bodies = [job_body(f"wave{sample}-{i:03d}", 1, 1, self.pods) for i in range(self.gangs)]
        await asyncio.gather(*(kube.request("POST", job_path(self.namespace), body) for body in bodies))
        await asyncio.sleep(self.LEAD_S)

    async def finish(self, kube: Kube, tracker: PodTracker, timeout_s: float = 300.0) -> float:
        """Wait until every pod of the wave is bound; returns when (monotonic), then deletes the wave."""
        await tracker.wait(lambda: len(tracker.bound()) >= self.gangs * self.pods, timeout_s)
        done = max(tracker.bound_at.values())
        await kube.request("DELETE", job_path(self.namespace))
        await tracker.wait(lambda: not tracker.pods, timeout_s)
        return done


def start_operator(
    cluster: DevCluster,
    workdir: Path,
    write_concurrency: int = DEFAULT_WRITE_CONCURRENCY,
    lease_duration: float = 5.0,
    spares_per_clique: int = 0,
) -> OperatorProcess:
    """``paralleljob operator`` started as a separate process against ``cluster`` (``operator.log`` in
    ``workdir``); ``stop()`` it when done. ``spares_per_clique``: whole free NVL72 trays per clique held
    back for repairs (the topology's ``nvlinkSparesPerClique``)."""
    extra: tuple[str, ...] = ("--write-concurrency", str(write_concurrency))
    if spares_per_clique:
        topology = workdir / "topology.yaml"
        topology.write_text(f"topology:\n  nvlinkSparesPerClique: {spares_per_clique}\n")
        extra += ("--topology-config", str(topology))
    operator = OperatorProcess(
        cluster.kubeconfig,
        workdir,
        lease_seconds=lease_duration,
        log_level="WARNING",
        extra_args=extra,
        log_name="operator.log",
    )
    operator.start()
    return operator

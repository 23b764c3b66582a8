"""The seeded disturbances of a chaos run. Each :meth:`Monkey.step` first undoes what is due (a node back to
Ready, a deleted node re-created, an unhealthy-GPU annotation cleared), then does one random thing: apply a
job, delete one, turn a node NotReady, delete a node, mark GPUs unhealthy, or crash a worker. Everything
goes through the API, as a platform team's tooling (or a kubelet) would; nothing malformed is sent.

The same seed gives the same sequence of choices; what the cluster makes of them depends on timing.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from paralleljob.devcluster import chaos
from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION, FAIL_AFTER_ANNOTATION
from paralleljob.devcluster.nodes import NodeShape, create_gpu_nodes
from paralleljob.k8s.edge.constants import API_VERSION, JOB_LABEL, KIND
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, pod_path

# (TP, PP, DP): 1 to 16 GPUs, some TP groups filling whole nodes
SHAPES = ((1, 1, 1), (1, 2, 2), (2, 1, 2), (2, 2, 2), (4, 1, 1), (4, 2, 1), (8, 1, 1), (8, 2, 1), (1, 4, 2))


@dataclass
class Monkey:
    kube: Kube
    namespace: str
    shape: NodeShape
    rng: random.Random
    max_jobs: int = 14
    max_broken_nodes: int = 4
    jobs: set[str] = field(default_factory=set)  # applied and not deleted by us
    ops: Counter[str] = field(default_factory=Counter)
    undo: list[tuple[float, str, str]] = field(default_factory=list)  # (due, what, node)
    broken: set[str] = field(default_factory=set)  # NotReady or deleted, until undone
    serial: int = 0

    async def step(self, now: float) -> None:
        await self.undo_due(now)
        actions: list[tuple[str, float]] = [
            ("apply", 3.0 if len(self.jobs) < self.max_jobs else 0.0),
            ("delete-job", 1.0 if self.jobs else 0.0),
            ("node-not-ready", 1.0 if len(self.broken) < self.max_broken_nodes else 0.0),
            ("node-delete", 0.5 if len(self.broken) < self.max_broken_nodes else 0.0),
            ("gpu-unhealthy", 1.0),
            ("worker-crash", 1.0),
        ]
        names, weights = zip(*actions, strict=True)
        action = self.rng.choices(names, weights)[0]
        try:
            await getattr(self, "_" + action.replace("-", "_"))(now)
        except (ApiError, ApiException) as exc:  # e.g. a pod we picked went away meanwhile
            self.ops[f"{action}-refused-{exc.status}"] += 1

    async def undo_due(self, now: float, everything: bool = False) -> None:
        due = [u for u in self.undo if everything or u[0] <= now]
        self.undo = [u for u in self.undo if u not in due]
        for _, what, node in due:
            try:
                await self._undo(what, node)
            except (ApiError, ApiException) as exc:  # e.g. GPUs marked unhealthy on a node deleted since
                self.ops[f"{what}-refused-{exc.status}"] += 1
            if what in ("heal", "recreate"):
                self.broken.discard(node)

    async def _undo(self, what: str, node: str) -> None:
        if what == "heal":
            await chaos.heal_node(self.kube.api, node)
            self.ops["node-ready"] += 1
        elif what == "recreate":
            await create_gpu_nodes(self.kube.api, self.shape, [self.shape.names().index(node)])
            self.ops["node-recreate"] += 1
        elif what == "gpu-healthy":
            await chaos.set_unhealthy_gpus(self.kube.api, node, [])
            self.ops["gpu-healthy"] += 1

    def _healthy_node(self) -> str | None:
        candidates = [n for n in self.shape.names() if n not in self.broken]
        return self.rng.choice(candidates) if candidates else None

    async def _apply(self, now: float) -> None:
        self.serial += 1
        name = f"chaos-{self.serial:04d}"
        tp, pp, dp = self.rng.choice(SHAPES)
        annotations = {}
        if self.rng.random() < 0.3:  # some finish on their own
            annotations[COMPLETE_AFTER_ANNOTATION] = f"{self.rng.randint(15, 60)}s"
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name},
            "spec": {
                "parallelism": {"tensor": tp, "pipeline": pp, "data": dp},
                "failurePolicy": {
                    "strategy": self.rng.choice(["minimal", "full"]),
                    "onUnplaceable": self.rng.choice(["Requeue", "Requeue", "Fail"]),
                    "maxRestarts": self.rng.choice([3, 50]),
                },
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {"containers": [{"name": "trainer", "image": "chaos:1"}]},
                },
            },
        }
        await self.kube.request("POST", job_path(self.namespace), body)
        self.jobs.add(name)
        self.ops["apply"] += 1

    async def _delete_job(self, now: float) -> None:
        name = self.rng.choice(sorted(self.jobs))
        self.jobs.discard(name)
        await self.kube.delete(job_path(self.namespace, name))
        self.ops["delete-job"] += 1

    async def _node_not_ready(self, now: float) -> None:
        node = self._healthy_node()
        if node is None:
            return
        await chaos.make_node_not_ready(self.kube.api, node)
        self.broken.add(node)
        self.undo.append((now + self.rng.uniform(3.0, 15.0), "heal", node))
        self.ops["node-not-ready"] += 1

    async def _node_delete(self, now: float) -> None:
        node = self._healthy_node()
        if node is None:
            return
        await chaos.delete_node(self.kube.api, node)
        self.broken.add(node)
        self.undo.append((now + self.rng.uniform(3.0, 15.0), "recreate", node))
        self.ops["node-delete"] += 1

    async def _gpu_unhealthy(self, now: float) -> None:
        node = self._healthy_node()
        if node is None or any(u[1] == "gpu-healthy" and u[2] == node for u in self.undo):
            return
        indices = self.rng.sample(range(self.shape.gpus_per_node), self.rng.randint(1, 2))
        await chaos.set_unhealthy_gpus(self.kube.api, node, indices)
        self.undo.append((now + self.rng.uniform(5.0, 20.0), "gpu-healthy", node))
        self.ops["gpu-unhealthy"] += 1

    async def _worker_crash(self, now: float) -> None:
        pods, _ = await self.kube.list(pod_path(self.namespace), {"labelSelector": JOB_LABEL})
        running = sorted(
            (p for p in pods if (p.get("status") or {}).get("phase") == "Running"),
            key=lambda p: str(p["metadata"]["name"]),
        )
        if not running:
            return
        pod = self.rng.choice(running)
        meta = pod["metadata"]
        patch = {"metadata": {"uid": meta["uid"], "annotations": {FAIL_AFTER_ANNOTATION: "0s"}}}
        await self.kube.merge_patch(pod_path(self.namespace, meta["name"]), patch)
        self.ops["worker-crash"] += 1

"""Helpers for the real-node e2e tests: the session's real cluster and reading what its kubelets wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from paralleljob.devcluster import hostcheck
from paralleljob.devcluster.cluster import DevCluster, down, reap_abandoned, up
from paralleljob.devcluster.nodenet import NodeNet
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.realnodes import load_image
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools.operatorproc import OperatorMetrics

REAL_NODE_GPUS = 4  # so TP2xPP2xDP2 (8 GPUs) must span both real nodes


@dataclass(frozen=True)
class RealCluster:
    cluster: DevCluster
    worker_image: str


def pod_log(cluster: DevCluster, namespace: str, pod: str, container: str) -> str:
    """A container's log as the kubelet wrote it (the API server cannot reach a kubelet in its namespace)."""
    found = sorted((cluster.run_dir / "nodes").glob(f"*/pod-logs/{namespace}_{pod}_*/{container}/*.log"))
    return "\n".join(Path(path).read_text(errors="replace") for path in found)


def skip_unless_real_nodes_can_run() -> None:
    problems = hostcheck.missing({**hostcheck.PROGRAMS, **hostcheck.IMAGE_PROGRAMS})  # nodes, and the images
    if problems:
        pytest.skip("real nodes cannot run here (an environment limit): " + "; ".join(problems))


REAL_ONLY = {"paralleljob.dev/real-node": "true"}


def worker_template(image: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    variables = [{"name": k, "value": v} for k, v in (env or {}).items()]
    variables.append(
        {"name": "WORKER_INCARNATION",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['paralleljob.dev/incarnation']"}}}
    )  # fmt: skip
    return {
        "spec": {
            "nodeSelector": REAL_ONLY,
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "trainer", "image": image, "imagePullPolicy": "Never", "env": variables,
                 "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}},
            ],
        }
    }  # fmt: skip


class InClusterOperator(OperatorMetrics):
    """The chart's operator (pods on the real nodes) as ``pjhelpers.Jobs`` and ``assert_settled`` use an
    operator: the leader is the Lease's holder, its ``/metrics`` are read from inside the leader's node (the
    host has no route to pod IPs), its log is what the kubelet wrote. Starting and stopping are the
    Deployment's business, so ``ensure_running`` does nothing. Its samples and leadership are read from those
    ``/metrics`` as for an operator process (``operatorproc.OperatorMetrics``)."""

    def __init__(self, cluster: DevCluster, kube: KubeSession, namespace: str, lease: str) -> None:
        self.cluster, self.kube, self.namespace, self.lease = cluster, kube, namespace, lease

    def leader(self) -> Any | None:
        from kubernetes_asyncio.client import CoordinationV1Api
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            lease = self.kube.run(CoordinationV1Api(self.kube.api).read_namespaced_lease(self.lease, self.namespace))
        except ApiException as exc:
            if exc.status == 404:  # no replica has led yet
                return None
            raise
        pods = self.kube.run(self.kube.core.list_namespaced_pod(self.namespace)).items
        return next((p for p in pods if p.metadata.name == lease.spec.holder_identity), None)

    def metrics(self) -> str:
        pod = self.leader()
        if pod is None or not pod.status.pod_ip:
            raise OSError("no leader pod with an IP")
        index = int(pod.spec.node_name.rsplit("-", 1)[1])
        netns = NodeNet(self.cluster.name, pod.spec.node_name, index).netns_path
        port = next(p.container_port for p in pod.spec.containers[0].ports if p.name == "metrics")
        fetch = f"import urllib.request; print(urllib.request.urlopen('http://{pod.status.pod_ip}:{port}/metrics').read().decode())"
        result = subprocess.run(
            ["nsenter", f"--net={netns}", "--", sys.executable, "-c", fetch],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        if result.returncode:
            raise OSError(result.stderr)
        return result.stdout

    def running(self) -> bool:
        return self.leader() is not None

    def ensure_running(self) -> None:
        pass

    def logs(self) -> str:
        pods = self.kube.run(self.kube.core.list_namespaced_pod(self.namespace)).items
        return "\n".join(pod_log(self.cluster, self.namespace, p.metadata.name, "operator") for p in pods)

    def log_size(self) -> int:
        return 0  # the replicas' logs are read whole: their start-up counts against the warning bound too

    def log_since(self, mark: int) -> str:
        return self.logs()[mark:]

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.logs().splitlines()[-lines:])


@contextmanager
def real_cluster_up(
    pytestconfig: pytest.Config, prefix: str, shape: NodeShape, gpus: int, label: str
) -> Iterator[RealCluster]:
    """A dev cluster with two real nodes of ``gpus`` fake GPUs each beside ``shape``'s kwok nodes, the worker
    image built and loaded on both, torn down after; skipped where real nodes cannot run. Progress goes to the
    terminal with pytest's capture lifted, prefixed ``[label]``."""
    skip_unless_real_nodes_can_run()
    from paralleljob.packaging.image import build_worker_image

    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def progress(message: str) -> None:
        if capture is None:
            print(message, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(f"[{label}] {message}", flush=True)

    reap_abandoned(prefix, report=progress)
    worker_tag, worker_archive = build_worker_image(progress)
    name = f"{prefix}{os.getpid()}"
    cluster = up(name, shape, report=progress, die_with_caller=True, real_nodes=2, real_node_gpus=gpus)
    try:
        load_image(name, cluster.run_dir, worker_archive)
        yield RealCluster(cluster, worker_tag)
    finally:
        down(name, report=progress)

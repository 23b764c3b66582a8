"""Fixtures for the real-node e2e tests: a cluster of its own with two kubelet nodes beside two kwok nodes.

- ``real_cluster`` (session): ``up(real_nodes=2)`` once for the session, with the worker image (and, for
  the chart test, the operator image) built by buildah and loaded on both nodes. Separate from the kwok-only
  ``dev_cluster``, so the other e2e tests never see the real nodes. On a machine that cannot run real
  nodes (not root, no network namespaces, no cgroups, packages missing) every test here is skipped with
  the reason, which ``paralleljob.devcluster.hostcheck`` words.
- ``real_kube``: a KubeSession on it; ``real_namespace``: a fresh namespace per test.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from paralleljob.devcluster import hostcheck
from paralleljob.devcluster.cluster import DevCluster, down, reap_abandoned, up
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.realnodes import load_image
from paralleljob.devcluster.session import KubeSession

REAL_CLUSTER_PREFIX = "e2e-real-"
REAL_SHAPE = NodeShape(count=2, gpus_per_node=8, nodes_per_rack=2)


@dataclass(frozen=True)
class RealCluster:
    cluster: DevCluster
    worker_image: str


def skip_unless_real_nodes_can_run() -> None:
    problems = hostcheck.missing()
    if problems:
        pytest.skip("real nodes cannot run here (an environment limit): " + "; ".join(problems))


@pytest.fixture(scope="session")
def real_cluster(pytestconfig: pytest.Config) -> Iterator[RealCluster]:
    skip_unless_real_nodes_can_run()
    from paralleljob.packaging.image import build_worker_image

    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def progress(message: str) -> None:
        if capture is None:
            print(message, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(f"[real nodes] {message}", flush=True)

    reap_abandoned(REAL_CLUSTER_PREFIX, report=progress)
    worker_tag, worker_archive = build_worker_image(progress)
    name = f"{REAL_CLUSTER_PREFIX}{os.getpid()}"
    cluster = up(name, REAL_SHAPE, report=progress, die_with_caller=True, real_nodes=2)
    try:
        load_image(name, cluster.run_dir, worker_archive)
        yield RealCluster(cluster, worker_tag)
    finally:
        down(name, report=progress)


@pytest.fixture(scope="session")
def real_kube(real_cluster: RealCluster) -> Iterator[KubeSession]:
    session = KubeSession(real_cluster.cluster.kubeconfig, real_cluster.cluster.shape)
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def real_namespace(real_kube: KubeSession, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    real_kube.run(real_kube.core.create_namespace({"metadata": {"name": name}}))
    try:
        yield name
    finally:
        real_kube.run(real_kube.core.delete_namespace(name))
        deadline = time.monotonic() + 60
        while real_kube.run(real_kube.core.list_namespaced_pod(name)).items and time.monotonic() < deadline:
            time.sleep(0.2)


def pod_log(cluster: DevCluster, namespace: str, pod: str, container: str) -> str:
    """A container's log as the kubelet wrote it (the API server cannot reach a kubelet in its namespace)."""
    found = sorted((cluster.run_dir / "nodes").glob(f"*/pod-logs/{namespace}_{pod}_*/{container}/*.log"))
    return "\n".join(Path(path).read_text(errors="replace") for path in found)

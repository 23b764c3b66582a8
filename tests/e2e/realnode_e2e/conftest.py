"""Fixtures for the real-node e2e tests: a cluster of its own with two kubelet nodes beside two kwok nodes.

- ``real_cluster`` (session): two real nodes (``REAL_NODE_GPUS`` fake GPUs each) up once for the session,
  with the worker image built by buildah and loaded on both nodes. Separate from the kwok-only
  ``dev_cluster``, so the other e2e tests never see the real nodes. On a machine that cannot run real
  nodes (not root, no network namespaces, no cgroups, packages missing) every test here is skipped with
  the reason, which ``paralleljob.devcluster.hostcheck`` words.
- ``real_kube``: a KubeSession on it; ``real_namespace``: a fresh namespace per test.
"""

from __future__ import annotations

import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator_e2e"))
from realhelpers import REAL_NODE_GPUS, RealCluster, real_cluster_up

from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.session import KubeSession

REAL_CLUSTER_PREFIX = "e2e-real-"
REAL_SHAPE = NodeShape(count=2, gpus_per_node=8, nodes_per_rack=2)


@pytest.fixture(scope="session")
def real_cluster(pytestconfig: pytest.Config) -> Iterator[RealCluster]:
    with real_cluster_up(pytestconfig, REAL_CLUSTER_PREFIX, REAL_SHAPE, REAL_NODE_GPUS, "real nodes") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def real_kube(real_cluster: RealCluster) -> Iterator[KubeSession]:
    with KubeSession(real_cluster.cluster.kubeconfig, real_cluster.cluster.shape) as session:
        yield session


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


@pytest.fixture(scope="module")
def real_operator(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The operator as a host process against the real cluster (the chart test runs it as a pod instead)."""
    from pjhelpers import OperatorProcess, running

    kubeconfig = real_cluster.cluster.kubeconfig
    with running(OperatorProcess(kubeconfig, tmp_path_factory.mktemp("operator"))) as proc:
        yield proc


@pytest.fixture
def real_pjs(real_kube: KubeSession, real_namespace: str, real_operator: object) -> Iterator[object]:
    from pjhelpers import jobs_in

    with jobs_in(real_kube, real_namespace, real_operator, check_view=True) as jobs:  # type: ignore[arg-type]
        yield jobs

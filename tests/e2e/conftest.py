"""Fixtures for end-to-end tests against a real kube-apiserver: the dev cluster of SPEC section 6.

- ``dev_cluster`` (session): brings one cluster up for the whole session (building the binaries first if
  the cache is cold, with progress on the terminal) and tears it down at the end, failures included.
  Set ``PARALLELJOB_E2E_CLUSTER=<name>`` to run against an already running ``paralleljob dev-cluster up``
  instead (faster when iterating; that cluster is left running). Optional controllers run only when a
  collected test needs them: a session with a test using the ``jobset`` fixture starts the cluster with
  JobSet (``up(controllers=("jobset",))``, its CRD installed before kube-controller-manager), others do not.
- ``kube`` (session): a :class:`~paralleljob.devcluster.session.KubeSession` (sync calls, chaos helpers).
- ``namespace``: a fresh namespace per test, deleted afterwards as on a real cluster: the controller
  manager's namespace controller deletes what is in it. The fixture waits only until its pods are gone (so
  their GPUs are free for the next test), not for the namespace itself, which the controller finishes
  later. The controller starts 5 s after the deletion (fixed upstream), so a test that leaves pods behind
  pays that much here.
- ``chaos``: the same KubeSession, plus a guarantee that every node is back and Ready after the test.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator

import pytest
from tests.e2e.sessioncluster import session_cluster

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.session import KubeSession
from paralleljob.devcluster.versions import ADDONS

E2E_CLUSTER_PREFIX = "e2e-"
# Two racks of four 8-GPU nodes: enough for placements that must cross a leaf switch.
E2E_SHAPE = NodeShape(count=8, gpus_per_node=8, nodes_per_rack=4)


@pytest.fixture(scope="session")
def dev_cluster(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    controllers = tuple(c for c in ADDONS if any(c in item.fixturenames for item in request.session.items))
    with session_cluster(
        pytestconfig, E2E_CLUSTER_PREFIX, E2E_SHAPE, "PARALLELJOB_E2E_CLUSTER", controllers=controllers
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kube(dev_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(dev_cluster.kubeconfig, dev_cluster.shape) as session:
        yield session


@pytest.fixture
def namespace(kube: KubeSession, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    kube.run(kube.core.create_namespace({"metadata": {"name": name, "labels": {"paralleljob.dev/e2e": "true"}}}))
    try:
        yield name
    finally:
        kube.run(kube.core.delete_namespace(name))
        wait_pods_gone(kube, name)


def wait_pods_gone(kube: KubeSession, namespace: str, timeout_s: float = 30.0) -> None:
    """Until the namespace controller has deleted every pod (kwok removes bound ones at once)."""
    deadline = time.monotonic() + timeout_s
    while pods := kube.run(kube.core.list_namespaced_pod(namespace)).items:
        if time.monotonic() > deadline:
            left = ", ".join(pod.metadata.name for pod in pods)
            pytest.fail(f"pods of deleted namespace {namespace} still there after {timeout_s:.0f} s: {left}")
        time.sleep(0.1)


@pytest.fixture
def chaos(kube: KubeSession) -> Iterator[KubeSession]:
    try:
        yield kube
    finally:
        kube.restore_nodes()

"""Fixtures for the DRA end-to-end tests: a dev cluster whose GPUs are ResourceSlices (``--gpu-api dra``).

It is a second, smaller cluster beside the session's device-plugin one (which these tests never start):
the API server flags differ, so one cluster cannot serve both modes. The operator's helpers
(``tests/e2e/operator_e2e/pjhelpers.py``) are reused as they are.

- ``dra_cluster`` (session): ``e2e-dra-<pid>``, four 8-GPU nodes in one rack, torn down at the end.
  ``PARALLELJOB_E2E_DRA_CLUSTER=<name>`` runs against a running ``paralleljob dev-cluster up --gpu-api dra
  --name <name>`` instead and leaves it running.
- ``dra_kube`` (session): a KubeSession on it.
- ``dra_namespace``: a fresh namespace per test, deleted afterwards.
- ``dra_operator`` (module): ``paralleljob operator`` against it, DRA discovery on (the default driver).
- ``dra_pjs``: ParallelJobs in the test's namespace, cleaned up as the operator suite's ``pjs`` are.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator_e2e"))

from drahelpers import TAINT_RULES, claims, custom
from pjhelpers import Jobs, OperatorProcess, jobs_in, running, wait_for
from tests.e2e.sessioncluster import session_cluster

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.session import KubeSession

DRA_CLUSTER_PREFIX = "e2e-dra-"
DRA_SHAPE = NodeShape(count=4, gpus_per_node=8, nodes_per_rack=4, gpu_api="dra")


@pytest.fixture(scope="session")
def dra_cluster(pytestconfig: pytest.Config) -> Iterator[DevCluster]:
    with session_cluster(
        pytestconfig,
        DRA_CLUSTER_PREFIX,
        DRA_SHAPE,
        "PARALLELJOB_E2E_DRA_CLUSTER",
        usable=lambda cluster: cluster.shape.gpu_api == "dra",
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def dra_kube(dra_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(dra_cluster.kubeconfig, dra_cluster.shape) as session:
        yield session


@pytest.fixture
def dra_namespace(dra_kube: KubeSession, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"dra-{request.node.name.lower().replace('_', '-')[:30].strip('-')}-{secrets.token_hex(3)}"
    labels = {"paralleljob.dev/e2e": "true"}
    dra_kube.run(dra_kube.core.create_namespace({"metadata": {"name": name, "labels": labels}}))
    try:
        yield name
    finally:
        dra_kube.run(dra_kube.core.delete_namespace(name))
        # Until the namespace controller has deleted its pods and ResourceClaims, so their GPUs are free for
        # the next test (a claim a test made to hold devices outlives its pods by a moment).
        wait_for(
            f"pods and claims of deleted namespace {name} gone",
            lambda: not dra_kube.run(dra_kube.core.list_namespaced_pod(name)).items and not claims(dra_kube, name),
            timeout_s=30,
        )


@pytest.fixture(scope="module")
def dra_operator(dra_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running(OperatorProcess(dra_cluster.kubeconfig, tmp_path_factory.mktemp("dra-operator"), "e2e-dra")) as proc:
        yield proc


@pytest.fixture
def dra_pjs(dra_kube: KubeSession, dra_namespace: str, dra_operator: OperatorProcess) -> Iterator[Jobs]:
    # The operator checks its kept view against a rebuild every pass (pjhelpers): in DRA mode the view also
    # patches nodes whose slices or claims changed (dranodes.py), and must still equal a rebuild.
    with jobs_in(dra_kube, dra_namespace, dra_operator, check_view=True) as jobs:
        yield jobs


@pytest.fixture
def taint_rules(dra_kube: KubeSession) -> Iterator[list[str]]:
    """DeviceTaintRules a test makes (``drahelpers.taint_gpu``), deleted after it."""
    made: list[str] = []
    yield made
    for name in made:
        dra_kube.run(custom(dra_kube).delete_cluster_custom_object(*TAINT_RULES, name))

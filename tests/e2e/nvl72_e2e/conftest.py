"""Fixtures for the NVL72 end-to-end tests: a DRA dev cluster with 2 GB200 NVL72 racks (36 trays of 4 GPUs,
``dev-cluster up --nvl72-racks 2``) beside 4 HGX nodes of 8 GPUs, the ComputeDomain CRD and the stand-in
for its controller. A third small cluster of its own: its API server serves DRA, like the DRA suite's.

- ``nvl72_cluster`` (session): ``e2e-nvl72-<pid>``, torn down at the end (``PARALLELJOB_E2E_NVL72_CLUSTER=<name>``
  runs against a running one instead and leaves it running).
- ``nvl72_kube`` (session): a KubeSession on it; ``nvl72_namespace``: a fresh namespace per test.
- ``nvl72_operator`` (module): ``paralleljob operator`` against it with 2 warm spare trays per clique
  (``nvlinkSparesPerClique``; the operator suite's helpers,
  ``tests/e2e/operator_e2e/pjhelpers.py``); ``nvl72_pjs``: ParallelJobs in the test's namespace, cleaned up
  and checked (settled, kept view equal to a rebuild) as the operator suite's ``pjs`` are.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator_e2e"))

from pjhelpers import Jobs, OperatorProcess, jobs_in, running
from tests.e2e.sessioncluster import session_cluster

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.session import KubeSession

NVL72_CLUSTER_PREFIX = "e2e-nvl72-"
HGX_SHAPE = NodeShape(count=4, gpus_per_node=8, nodes_per_rack=4, gpu_api="dra")
RACKS = 2
SPARES_PER_CLIQUE = 2  # the operator's nvlinkSparesPerClique in these tests


@pytest.fixture(scope="session")
def nvl72_cluster(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    jobset = any("nvl72_jobset" in item.fixturenames for item in request.session.items)
    with session_cluster(
        pytestconfig,
        NVL72_CLUSTER_PREFIX,
        HGX_SHAPE,
        "PARALLELJOB_E2E_NVL72_CLUSTER",
        nvl72_racks=RACKS,
        controllers=("jobset",) if jobset else (),
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def nvl72_kube(nvl72_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(nvl72_cluster.kubeconfig, nvl72_cluster.shape) as session:
        yield session


@pytest.fixture
def nvl72_namespace(nvl72_kube: KubeSession) -> Iterator[str]:
    name = f"nvl72-{secrets.token_hex(3)}"
    nvl72_kube.run(nvl72_kube.core.create_namespace({"metadata": {"name": name}}))
    try:
        yield name
    finally:
        nvl72_kube.run(nvl72_kube.core.delete_namespace(name))


@pytest.fixture(scope="module")
def nvl72_operator(nvl72_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_dir = tmp_path_factory.mktemp("nvl72-operator")
    # 2 warm spare trays per clique (the example): the default levels, only the spares set.
    topology = log_dir / "topology.yaml"
    topology.write_text(f"topology:\n  nvlinkSparesPerClique: {SPARES_PER_CLIQUE}\n")
    args = ("--topology-config", str(topology))
    with running(OperatorProcess(nvl72_cluster.kubeconfig, log_dir, "e2e-nvl72", extra_args=args)) as proc:
        yield proc


@pytest.fixture
def nvl72_pjs(nvl72_kube: KubeSession, nvl72_namespace: str, nvl72_operator: OperatorProcess) -> Iterator[Jobs]:
    with jobs_in(nvl72_kube, nvl72_namespace, nvl72_operator, check_view=True) as jobs:
        yield jobs

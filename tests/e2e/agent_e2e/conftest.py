"""Fixtures for the health agent's and the CLI's end-to-end tests on the session's dev cluster.

The operator's e2e helpers (``tests/e2e/operator_e2e/pjhelpers.py``) are reused as they are. This folder
runs its own operator, module-scoped and under its own leader-election identity: the operator tests' session
operator is not visible here, and a second operator under the *same* identity would also believe itself
leader. With distinct identities only one of them ever leads; this folder sorts before ``operator_e2e``, so
in a normal run its operator has stopped (releasing the lease) before theirs starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator_e2e"))

from pjhelpers import Jobs, OperatorProcess, jobs_in, running

from paralleljob.agent.signals import DRAINED_GPUS_ANNOTATION, GPU_HEALTH_ANNOTATION
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

IDENTITY = "e2e-agent-operator"


@pytest.fixture(scope="module")
def agent_operator(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running(OperatorProcess(dev_cluster.kubeconfig, tmp_path_factory.mktemp("agent-operator"), IDENTITY)) as proc:
        yield proc


@pytest.fixture
def pjs(kube: KubeSession, namespace: str, agent_operator: OperatorProcess) -> Iterator[Jobs]:
    with jobs_in(kube, namespace, agent_operator, check_view=False) as jobs:
        yield jobs


@pytest.fixture
def nodes_restored(chaos: KubeSession) -> Iterator[KubeSession]:
    """``chaos`` plus removal of the annotations only the agent and the CLI write (restore_nodes keeps them)."""
    try:
        yield chaos
    finally:
        for node in chaos.run(chaos.core.list_node()).items:
            patch = {"metadata": {"annotations": {DRAINED_GPUS_ANNOTATION: None, GPU_HEALTH_ANNOTATION: None}}}
            chaos.run(chaos.core.patch_node(node.metadata.name, patch))


@pytest.fixture
def cli_env(dev_cluster: DevCluster) -> dict[str, str]:
    """Environment for running ``paralleljob`` / ``kubectl paralleljob`` as a user would."""
    bin_dir = str(Path(sys.executable).parent)
    path = f"{bin_dir}:{os.environ['PATH']}"
    # A wide terminal, so the pictures do not fold the (long) test namespaces.
    return {**os.environ, "KUBECONFIG": str(dev_cluster.kubeconfig), "PATH": path, "COLUMNS": "220"}

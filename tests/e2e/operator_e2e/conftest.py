"""Fixtures for the operator's end-to-end tests (helpers live in ``pjhelpers``).

- ``pj_operator`` (module): ``paralleljob operator`` as a real subprocess against the session's dev cluster
  (so "kill it mid-gang" is a real kill), with its own metrics port; tests may stop and restart it. Module
  scope: it runs only while these tests do, never beside another suite's operator on the shared cluster.
- ``pjs``: create/read/wait/delete ParallelJobs in the test's namespace; at teardown every ParallelJob is
  deleted and the test waits until the operator removed their pods, so the next test starts on free GPUs;
  and the operator's kept cluster view, compared with a rebuild on every pass, must never have differed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pjhelpers import Jobs, OperatorProcess, jobs_in, running

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession


@pytest.fixture(scope="module")
def pj_operator(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running(OperatorProcess(dev_cluster.kubeconfig, tmp_path_factory.mktemp("operator"))) as proc:
        yield proc


@pytest.fixture
def pjs(kube: KubeSession, namespace: str, pj_operator: OperatorProcess) -> Iterator[Jobs]:
    with jobs_in(kube, namespace, pj_operator, check_view=True) as jobs:
        yield jobs

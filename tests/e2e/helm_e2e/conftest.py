"""Fixtures for the Helm chart's end-to-end tests on the session's dev cluster.

- ``release`` (module): ``helm install`` of ``charts/paralleljob`` into a fresh namespace with an isolated
  helm home; uninstalled at the end if a test has not done so. The Deployment gets no pod here (there is no
  controller-manager), so the operator runs out of cluster instead:
- ``chart_operator`` (module): ``paralleljob operator`` as a subprocess with exactly the arguments of the
  chart's Deployment, the chart's topology file, a kubeconfig that holds nothing but a token of the
  chart's ServiceAccount (TokenRequest API), and the variables the release's Services would put into its
  pod through service links. Whatever it manages to do, the chart's RBAC allows.
- ``pjs``: the operator tests' ParallelJob helper bound to that operator.

This folder sorts before ``operator_e2e`` on purpose: that folder's operator lives for the rest of the
session and watches every namespace, so it would also act on these jobs (with admin rights) and the RBAC
proof would prove nothing. ``release`` refuses to start while another operator holds the default Lease.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator_e2e"))

from helmhelpers import (
    INSTALL_VALUES,
    RELEASE,
    SERVICE_ACCOUNT,
    ChartOperator,
    Release,
    deployment_args,
    other_operator_leads,
    service_account_kubeconfig,
    service_link_env,
)
from pjhelpers import Jobs, jobs_in, running
from tests.packaging.live import live_report

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.packaging.chart import chart_dir
from paralleljob.packaging.helm import ensure_helm, helm_env


@pytest.fixture(scope="module")
def release(
    dev_cluster: DevCluster, kube: KubeSession, pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    other = other_operator_leads(kube)
    if other:
        pytest.fail(f"operator {other!r} is active on this cluster; the chart's RBAC test needs it stopped")
    ensure_helm(live_report(pytestconfig))
    work = tmp_path_factory.mktemp("helm-release")
    namespace = f"pj-system-{secrets.token_hex(3)}"
    kube.run(kube.core.create_namespace({"metadata": {"name": namespace, "labels": {"paralleljob.dev/e2e": "true"}}}))
    rel = Release(
        RELEASE, namespace, helm_env(work / "helm-home", dev_cluster.kubeconfig), dev_cluster.kubeconfig, work
    )
    args = ["install", RELEASE, str(chart_dir())]
    for value in INSTALL_VALUES:
        args += ["--set", value]
    rel.helm(*args)
    try:
        yield rel
    finally:
        rel.helm("uninstall", RELEASE, "--ignore-not-found", check=False)
        kube.run(kube.core.delete_namespace(namespace))


@pytest.fixture(scope="module")
def chart_operator(kube: KubeSession, release: Release) -> Iterator[ChartOperator]:
    configmap = kube.run(kube.core.read_namespaced_config_map(f"{SERVICE_ACCOUNT}-topology", release.namespace))
    topology = release.work / "topology.yaml"
    topology.write_text(configmap.data["topology.yaml"])
    kubeconfig = service_account_kubeconfig(kube, release, release.work / "sa-kubeconfig")
    links = service_link_env(kube, release.namespace)
    with running(ChartOperator(kubeconfig, release.work, deployment_args(kube, release, topology), links)) as proc:
        yield proc


@pytest.fixture
def pjs(kube: KubeSession, namespace: str, chart_operator: ChartOperator) -> Iterator[Jobs]:
    with jobs_in(kube, namespace, chart_operator, check_view=False) as jobs:
        yield jobs

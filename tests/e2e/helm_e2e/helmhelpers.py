"""Helpers for the chart's end-to-end tests: the release under test, a kubeconfig holding only a token of
the chart's ServiceAccount, and the operator run with the chart Deployment's own arguments and with the
variables the kubelet's service links would give its pod.

The release is named as the README names it (``paralleljob``): the chart's fullname is then ``paralleljob``
itself and its metrics Service ``paralleljob-metrics``, whose service link ``PARALLELJOB_METRICS_PORT`` once
crash-looped the operator. A release named ``pj`` (as these tests once did) never met that."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator_e2e"))

from pjhelpers import OperatorProcess

from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.lease import verdict
from paralleljob.packaging.chart import chart_dir
from paralleljob.packaging.helm import run_helm
from paralleljob.packaging.servicelinks import link_variables

RELEASE = "paralleljob"  # the README's `helm install paralleljob charts/paralleljob ...`
# The chart's fullname (_helpers.tpl): the release name alone when it contains the chart's name.
FULLNAME = RELEASE if "paralleljob" in RELEASE else f"{RELEASE}-paralleljob"
SERVICE_ACCOUNT = FULLNAME  # the operator's ServiceAccount, Deployment, ClusterRole: the fullname
IDENTITY = f"{FULLNAME}-e2e-0"  # stands in for the pod name ($(POD_NAME))
# The default 15 s lease: a 4 s one (renewed within 2.7 s) was lost to a busy API server on a loaded machine,
# and the operator restarted under its own identity retakes its Lease at once whatever its length.
INSTALL_VALUES = (
    "operator.leaderElection.leaseDurationSeconds=15",
    "operator.resyncSeconds=10",
    "image.tag=e2e",
    "webView.enabled=true",
)
WEB_ACCOUNT = f"{SERVICE_ACCOUNT}-web"  # the web view's Deployment, Service, ServiceAccount and ClusterRole


@dataclass
class Release:
    name: str
    namespace: str
    env: dict[str, str]  # for helm: admin kubeconfig, private helm home
    admin_kubeconfig: Path
    work: Path

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_helm([*args, "--namespace", self.namespace], self.env, check=check)

    def upgrade(self, *sets: str) -> None:
        args = ["upgrade", self.name, str(chart_dir()), "--reuse-values"]
        for value in sets:
            args += ["--set", value]
        self.helm(*args)


def other_operator_leads(kube: KubeSession) -> str:
    """The identity of a live leader of the default Lease (the other e2e folders' operators), or ''."""
    from kubernetes_asyncio.client import CoordinationV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    api: Any = CoordinationV1Api(kube.api)
    try:
        lease = kube.run(api.read_namespaced_lease("paralleljob-operator", "default"))
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    spec = kube.api.sanitize_for_serialization(lease.spec) or {}
    if verdict(spec, "helm-e2e-probe", dt.datetime.now(dt.UTC)).take:
        return ""  # expired or released
    return str(spec.get("holderIdentity") or "")


def service_account_kubeconfig(
    kube: KubeSession, release: Release, path: Path, account: str = SERVICE_ACCOUNT
) -> Path:
    """A kubeconfig whose only credential is a fresh token of one of the chart's ServiceAccounts."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = kube.run(kube.core.create_namespaced_service_account_token(account, release.namespace, request))
    config = yaml.safe_load(release.admin_kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token.status.token}}]
    for context in config["contexts"]:
        context["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def service_link_env(kube: KubeSession, namespace: str) -> dict[str, str]:
    """What the kubelet's service links put into a pod of ``namespace`` with ``enableServiceLinks`` on: the
    chart turns them off, and our programs must not care either way (a user's own Services, another chart's
    pod template). Read from the Services there now, with their real cluster IPs."""
    services = kube.run(kube.core.list_namespaced_service(namespace)).items
    out: dict[str, str] = {}
    for service in services:
        out.update(link_variables(kube.api.sanitize_for_serialization(service)))
    return out


class ChartOperator(OperatorProcess):
    """``paralleljob operator`` run the way the chart's Deployment runs it, with the chart's credentials and
    the environment a pod of the release's namespace would get from service links."""

    def __init__(
        self, kubeconfig: Path, log_dir: Path, deployment_args: list[str], link_env: dict[str, str] | None = None
    ) -> None:
        super().__init__(kubeconfig, log_dir, log_name="chart-operator-{start}.log")
        self.deployment_args = deployment_args
        self.link_env = dict(link_env or {})

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "paralleljob.cli", *self.deployment_args,
            # Out of cluster: the token kubeconfig instead of the pod's mounted token, and a free local port.
            f"--kubeconfig={self.kubeconfig}", f"--metrics-port={self.port}", "--metrics-host=127.0.0.1",
            # Some refusals are only logged at debug level (queue status, events): the tests look for 403s.
            "--log-level=DEBUG",
        ]  # fmt: skip

    def environment(self, extra_env: dict[str, str] | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAME", "POD_NAMESPACE")}
        return {**env, **self.link_env, **(extra_env or {})}


def deployment_args(kube: KubeSession, release: Release, topology_file: Path) -> list[str]:
    """The chart Deployment's container args with what the kubelet would substitute filled in."""
    from kubernetes_asyncio.client import AppsV1Api

    apps: Any = AppsV1Api(kube.api)
    deployment = kube.run(apps.read_namespaced_deployment(SERVICE_ACCOUNT, release.namespace))
    (container,) = deployment.spec.template.spec.containers
    args = []
    for arg in container.args:
        arg = arg.replace("$(POD_NAMESPACE)", release.namespace).replace("$(POD_NAME)", IDENTITY)
        if arg.startswith("--topology-config="):
            arg = f"--topology-config={topology_file}"  # the ConfigMap, as the pod would see it mounted
        args.append(arg)
    return args

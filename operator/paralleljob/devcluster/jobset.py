"""Run JobSet's controller manager (``sigs.k8s.io/jobset``) against a dev cluster, webhooks on loopback.

Only for the clusters that ask for it (``up --controllers jobset``, which the e2e session does when a JobSet
test is collected, or :func:`start_jobset` on a running cluster that lacks it), so the others start exactly
as before.
Everything it applies comes from the pinned JobSet module, copied next to the binary by the build: the CRD,
the webhook configurations (with the objectSelector patches of upstream's kustomization) and the
ClusterRoles. It runs as the user ``jobset-controller-manager`` with those roles bound to it, as upstream's
service account is, so a permission JobSet lacks shows up here as on a real cluster.

Its webhooks are served, not disabled: JobSet's defaulting webhook fills in what a JobSet leaves out, as it
does in production. The controller serves them (and its metrics) on 127.0.0.1 with a certificate from the
cluster's CA (``internalCertManagement`` off: there is no Service and no Secret to rotate), and the webhook
configurations call them by URL, ``https://127.0.0.1:<port>/<path>``, with that CA as ``caBundle``. They are
registered only once the controller answers ``/readyz`` (which waits for its webhook server), because their
``failurePolicy`` is ``Fail``. Leader election is off (one instance).
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from paralleljob.devcluster import crds, process, state
from paralleljob.devcluster.build import ensure_addon
from paralleljob.devcluster.certs import JOBSET_USER
from paralleljob.devcluster.controlplane import poll
from paralleljob.devcluster.kubeconfig import api_client

PROCESS_NAME = "jobset-controller-manager"
KUBECONFIG_NAME = "jobset-controller-manager.kubeconfig"
# Upstream's kustomization prefixes every cluster-scoped name with this.
NAME_PREFIX = "jobset-"
_MODULE = Path("module/config/components")

Report = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def crd_dir(folder: Path) -> Path:
    """Where the build put the module's CRD (``folder`` from ``ensure_addon("jobset")``)."""
    return folder / _MODULE / "crd" / "bases"


def running_jobset(record: state.ClusterRecord) -> state.ProcessRecord | None:
    return next((p for p in record.processes if p.name == PROCESS_NAME and process.is_alive(p)), None)


def start_jobset(
    name: str, report: Report = _stderr, die_with_caller: bool = False, timeout_s: float = 60.0
) -> state.ProcessRecord:
    """Start JobSet on the running cluster ``name`` (a no-op when it already runs there) and return once its
    webhooks are registered. The process is recorded in the cluster's state, so ``down`` stops it."""
    record = state.load(name)
    if record is None or not record.kubeconfig:
        raise RuntimeError(f"no dev cluster named {name!r} is running")
    if (running := running_jobset(record)) is not None:
        return running
    folder = ensure_addon("jobset", report)
    run_dir = Path(record.run_dir)
    webhook_port, metrics_port, health_port = process.free_loopback_ports(3)
    config = _write_config(run_dir, webhook_port, metrics_port, health_port)
    asyncio.run(_install_crd_and_rbac(record.kubeconfig, folder))

    argv = [str(folder / PROCESS_NAME), f"--kubeconfig={run_dir / KUBECONFIG_NAME}", f"--config={config}"]
    log = run_dir / "logs" / f"{PROCESS_NAME}.log"
    proc = process.spawn(PROCESS_NAME, argv, log, die_with_parent=die_with_caller)
    record.processes = [p for p in record.processes if p.name != PROCESS_NAME] + [proc]
    record.ports.update({"jobset-webhook": webhook_port, "jobset-metrics": metrics_port, "jobset-health": health_port})
    state.save(record)

    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=5) as response:
            return bool(response.status == 200)

    poll(proc, ready, timeout_s)
    ca_bundle = (run_dir / "pki" / "ca.crt").read_bytes()
    asyncio.run(_register_webhooks(record.kubeconfig, folder, webhook_port, ca_bundle))
    report(f"JobSet controller manager up on {name!r} (webhooks at https://127.0.0.1:{webhook_port})")
    return proc


def _write_config(run_dir: Path, webhook_port: int, metrics_port: int, health_port: int) -> Path:
    """JobSet's own Configuration file; its serving certificate goes where controller-runtime looks for it."""
    work = run_dir / "jobset"
    certs = work / "serving-certs"
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "pki" / "jobset.crt", certs / "tls.crt")
    shutil.copyfile(run_dir / "pki" / "jobset.key", certs / "tls.key")
    (certs / "tls.key").chmod(0o600)
    configuration = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "certDir": str(certs)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(configuration))
    return path


def module_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


async def _install_crd_and_rbac(kubeconfig: str, folder: Path) -> None:
    from kubernetes_asyncio.client import RbacAuthorizationV1Api

    async with api_client(kubeconfig) as api:
        await crds.install_crds(api, crd_dir(folder))  # again, if `up` did: create or replace, cheap
        rbac: Any = RbacAuthorizationV1Api(api)
        for file in ("role.yaml", "auth_proxy_role.yaml"):
            for role in module_documents(folder / _MODULE / "rbac" / file):
                role_name = NAME_PREFIX + role["metadata"]["name"]
                role["metadata"] = {"name": role_name}
                binding = {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": role_name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": JOBSET_USER}],
                }
                await apply_object(rbac, "cluster_role", role)
                await apply_object(rbac, "cluster_role_binding", binding)


def webhook_configurations(folder: Path, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Upstream's webhook configurations, patched as its kustomization patches them, pointed at loopback."""
    patch_dir = folder / _MODULE / "webhook" / "patches"
    patches = {  # each file is one list of JSON-patch operations
        "MutatingWebhookConfiguration": yaml.safe_load((patch_dir / "mutating-patch.yaml").read_text()) or [],
        "ValidatingWebhookConfiguration": yaml.safe_load((patch_dir / "validating-patch.yaml").read_text()) or [],
    }
    configurations = module_documents(folder / _MODULE / "webhook" / "manifests.yaml")
    for configuration in configurations:
        for operation in patches.get(configuration["kind"], []):
            _replace_webhook(configuration, operation)
        configuration["metadata"] = {"name": NAME_PREFIX + configuration["metadata"]["name"]}
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
    return configurations


def _replace_webhook(configuration: dict[str, Any], operation: dict[str, Any]) -> None:
    """The one JSON-patch form upstream's webhook patches use: ``replace /webhooks/<i>``."""
    op, path, prefix = operation.get("op"), str(operation.get("path", "")), "/webhooks/"
    if op != "replace" or not path.startswith(prefix) or not path[len(prefix) :].isdigit():
        raise RuntimeError(f"unexpected webhook patch in the JobSet module: {operation}")
    configuration["webhooks"][int(path[len(prefix) :])] = operation["value"]


async def _register_webhooks(kubeconfig: str, folder: Path, port: int, ca_bundle: bytes) -> None:
    from kubernetes_asyncio.client import AdmissionregistrationV1Api

    async with api_client(kubeconfig) as api:
        admission: Any = AdmissionregistrationV1Api(api)
        for configuration in webhook_configurations(folder, port, ca_bundle):
            kind = "mutating" if configuration["kind"] == "MutatingWebhookConfiguration" else "validating"
            await apply_object(admission, f"{kind}_webhook_configuration", configuration)


async def apply_object(client: Any, kind: str, document: dict[str, Any]) -> None:
    """Create the cluster-scoped object, or replace the one there (a restarted controller's new port)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    name = document["metadata"]["name"]
    try:
        await getattr(client, f"create_{kind}")(document)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = await getattr(client, f"read_{kind}")(name)
        document["metadata"]["resourceVersion"] = current.metadata.resource_version
        await getattr(client, f"replace_{kind}")(name, document)

"""Run Kueue's controller manager (``sigs.k8s.io/kueue``) against a dev cluster, webhooks on loopback.

Only for the clusters that ask for it (``up --controllers kueue``, or :func:`start_kueue` on a running
cluster), so the others start exactly as before. As with JobSet (``devcluster/jobset.py``) everything it
applies comes from the pinned module, copied next to the binary by the build (:mod:`.kueuemanifests` says
what and how it differs from upstream's install): the CRDs, the webhook configurations, the CRD conversion
webhooks and the roles, bound to the user ``kueue-controller-manager``. Kueue admits workloads and writes
their topology assignment; kube-scheduler, started beside it by ``up``, binds the pods.

Two things of Kueue's need a place on the host: its webhook server reads the certificate from the directory
its Configuration names (the cluster's CA signs it), but with its internal certificate manager off its
metrics server reads one from the fixed path ``/etc/kueue/metrics/certs`` (cmd/kueue/main.go) and exits if
there is none. So it runs in a mount namespace of its own where the run directory's copy is bind-mounted on
that path: each cluster's Kueue sees its own certificate and nothing is written under /etc but the empty
mount point. That takes root (as real nodes do). Webhooks are registered only once ``/readyz`` answers
(Kueue's readiness waits for its webhook server), since their ``failurePolicy`` is ``Fail``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from paralleljob.devcluster import crds, kueuemanifests, process, state
from paralleljob.devcluster.build import ensure_addon
from paralleljob.devcluster.controlplane import poll
from paralleljob.devcluster.jobset import apply_object
from paralleljob.devcluster.kubeconfig import api_client

PROCESS_NAME = "kueue-controller-manager"
KUBECONFIG_NAME = "kueue-controller-manager.kubeconfig"
METRICS_CERT_PATH = Path("/etc/kueue/metrics/certs")  # fixed in Kueue's cmd/kueue/main.go
PORT_NAMES = ("kueue-webhook", "kueue-metrics", "kueue-health")

Report = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class KueueNeedsRoot(RuntimeError):
    """Kueue's metrics certificate path is fixed; mounting the cluster's over it takes root."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise KueueNeedsRoot(
            f"Kueue reads its metrics certificate from {METRICS_CERT_PATH} (fixed in its main.go); the dev "
            "cluster mounts its own there in a private mount namespace, which needs root"
        )


def allocate_ports() -> dict[str, int]:
    return dict(zip(PORT_NAMES, process.free_loopback_ports(len(PORT_NAMES)), strict=True))


def crd_documents(folder: Path, webhook_port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs with their conversion webhooks on ``webhook_port`` (``kueuemanifests.crd_documents``)."""
    return kueuemanifests.crd_documents(folder, webhook_port, ca_bundle)


def running_kueue(record: state.ClusterRecord) -> state.ProcessRecord | None:
    return next((p for p in record.processes if p.name == PROCESS_NAME and process.is_alive(p)), None)


def start_kueue(
    name: str,
    report: Report = _stderr,
    die_with_caller: bool = False,
    timeout_s: float = 180.0,
    client_qps: int = 0,
) -> state.ProcessRecord:
    """Start Kueue on the running cluster ``name`` (a no-op when it already runs there) and return once its
    webhooks are registered; ``client_qps`` > 0 raises (or lowers) its API client's limit. The process is
    recorded in the cluster's state, so ``down`` stops it."""
    record = state.load(name)
    if record is None or not record.kubeconfig:
        raise RuntimeError(f"no dev cluster named {name!r} is running")
    if (running := running_kueue(record)) is not None:
        return running
    require_root()
    folder = ensure_addon("kueue", report)
    run_dir = Path(record.run_dir)
    # the ports `up` chose when it installed the CRDs (their conversion webhooks name the webhook port): then
    # they are left as they are, since a CRD whose conversion changes has its storage rebuilt, and lists of
    # it are refused (429) until its watch cache fills again
    installed = set(PORT_NAMES) <= set(record.ports)
    ports = {n: record.ports[n] for n in PORT_NAMES} if installed else allocate_ports()
    webhook_port, metrics_port, health_port = (ports[n] for n in PORT_NAMES)
    certs = _serving_certs(run_dir)
    config = kueuemanifests.configuration(folder, certs, webhook_port, metrics_port, health_port, client_qps)
    config_path = run_dir / "kueue" / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    ca_bundle = (run_dir / "pki" / "ca.crt").read_bytes()
    asyncio.run(
        _install(record.kubeconfig, [] if installed else crd_documents(folder, webhook_port, ca_bundle), folder)
    )

    METRICS_CERT_PATH.mkdir(parents=True, exist_ok=True)  # the mount point; stays empty on the host
    binary = [str(folder / PROCESS_NAME), f"--kubeconfig={run_dir / KUBECONFIG_NAME}", f"--config={config_path}"]
    # unshare execs (no fork), so the recorded PID is Kueue's own once sh has exec'd it
    argv = [
        "unshare", "--mount", "--propagation", "private", "--",
        "/bin/sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "kueue-mount",
        str(certs), str(METRICS_CERT_PATH),
        *binary,
    ]  # fmt: skip
    log = run_dir / "logs" / f"{PROCESS_NAME}.log"
    proc = process.spawn(PROCESS_NAME, argv, log, die_with_parent=die_with_caller)
    record.processes = [p for p in record.processes if p.name != PROCESS_NAME] + [proc]
    record.ports.update(ports)
    state.save(record)

    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=5) as response:
            return bool(response.status == 200)

    poll(proc, ready, timeout_s)
    asyncio.run(_register(record.kubeconfig, folder, webhook_port, ca_bundle))
    report(f"Kueue controller manager up on {name!r} (webhooks at https://127.0.0.1:{webhook_port})")
    return proc


def _serving_certs(run_dir: Path) -> Path:
    """The cluster's Kueue pair, where controller-runtime's webhook server (and the metrics mount) look."""
    certs = run_dir / "kueue" / "serving-certs"
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "pki" / "kueue.crt", certs / "tls.crt")
    shutil.copyfile(run_dir / "pki" / "kueue.key", certs / "tls.key")
    (certs / "tls.key").chmod(0o600)
    return certs


async def _install(kubeconfig: str, crd_documents: list[dict[str, Any]], folder: Path) -> None:
    """The CRDs (unless ``up`` installed them), Kueue's namespace and its roles."""
    from kubernetes_asyncio.client import CoreV1Api, RbacAuthorizationV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    async with api_client(kubeconfig) as api:
        if crd_documents:
            await crds.install_documents(api, crd_documents)
        core: Any = CoreV1Api(api)
        try:
            await core.create_namespace({"metadata": {"name": kueuemanifests.NAMESPACE}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        rbac: Any = RbacAuthorizationV1Api(api)
        for document in kueuemanifests.rbac(folder):
            kind = {"ClusterRole": "cluster_role", "ClusterRoleBinding": "cluster_role_binding"}.get(document["kind"])
            if kind is not None:
                await apply_object(rbac, kind, document)
            else:
                await _apply_namespaced(rbac, document)


async def _apply_namespaced(rbac: Any, document: dict[str, Any]) -> None:
    from kubernetes_asyncio.client.exceptions import ApiException

    kind = "role" if document["kind"] == "Role" else "role_binding"
    namespace, name = document["metadata"]["namespace"], document["metadata"]["name"]
    try:
        await getattr(rbac, f"create_namespaced_{kind}")(namespace, document)
    except ApiException as exc:
        if exc.status != 409:
            raise
        await getattr(rbac, f"replace_namespaced_{kind}")(name, namespace, document)


async def _register(kubeconfig: str, folder: Path, port: int, ca_bundle: bytes) -> None:
    from kubernetes_asyncio.client import AdmissionregistrationV1Api

    async with api_client(kubeconfig) as api:
        admission: Any = AdmissionregistrationV1Api(api)
        for configuration in kueuemanifests.webhook_configurations(folder, port, ca_bundle):
            kind = "mutating" if configuration["kind"] == "MutatingWebhookConfiguration" else "validating"
            await apply_object(admission, f"{kind}_webhook_configuration", configuration)

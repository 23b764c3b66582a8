"""Start etcd and kube-apiserver on loopback and wait until each one answers its health endpoint.

The API server is configured the way controller-runtime's envtest runs it: static token authentication,
a self-signed serving certificate, RBAC, and service-account signing keys, with the ``ServiceAccount`` and
``TaintNodesByCondition`` admission plugins off: the controller manager runs no service-account controller
(so no namespace gets a ``default`` ServiceAccount for the plugin to demand), and there is no kubelet whose
conditions should taint nodes. Readiness is probed with plain HTTPS so that starting a cluster needs no
Kubernetes client.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from paralleljob.devcluster import process
from paralleljob.devcluster.certs import Pki
from paralleljob.devcluster.state import ProcessRecord

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"


class StartupError(RuntimeError):
    """A process did not come up; the message carries the tail of its log."""


def start_etcd(
    binary: Path, run_dir: Path, client_port: int, peer_port: int, die_with_parent: bool = False
) -> ProcessRecord:
    client_url = f"http://127.0.0.1:{client_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    argv = [
        str(binary),
        "--name=dev",
        f"--data-dir={run_dir / 'etcd-data'}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=dev={peer_url}",
        "--initial-cluster-state=new",
        # Throw-away data: skipping fsync makes every API write much faster on a shared CI disk.
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]
    return process.spawn("etcd", argv, run_dir / "logs" / "etcd.log", die_with_parent=die_with_parent)


def start_apiserver(
    binary: Path,
    run_dir: Path,
    pki: Pki,
    port: int,
    etcd_client_port: int,
    die_with_parent: bool = False,
    extra_args: tuple[str, ...] = (),
    service_account_admission: bool = False,
) -> ProcessRecord:
    """``service_account_admission``: pods get their ServiceAccount's projected token (real nodes need it
    for in-cluster clients; kwok pods never read one, and no controller makes ``default`` accounts there)."""
    disabled = "TaintNodesByCondition" if service_account_admission else "ServiceAccount,TaintNodesByCondition"
    argv = [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_client_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        # 1.37 refuses a loopback advertise address to the endpoint reconciler, which would only publish it as
        # the ``kubernetes`` Service's endpoint; nothing here reads that (a real node's pods reach the API
        # server through the node's DNAT to its relay), so the Service is kept without endpoints.
        "--endpoint-reconciler-type=none",
        f"--secure-port={port}",
        f"--cert-dir={run_dir / 'pki'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--token-auth-file={pki.token_file}",
        "--authorization-mode=RBAC",
        f"--service-account-key-file={pki.service_account_public_key}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--disable-admission-plugins={disabled}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
        *extra_args,
    ]
    log = run_dir / "logs" / "kube-apiserver.log"
    return process.spawn("kube-apiserver", argv, log, die_with_parent=die_with_parent)


def _fail(record: ProcessRecord, why: str) -> StartupError:
    return StartupError(f"{record.name} {why}; last lines of {record.log}:\n{process.tail(record.log)}")


async def watch_processes(records: list[ProcessRecord]) -> None:
    """Raise StartupError as soon as one of ``records`` exits; run it beside work that needs them all."""
    while True:
        for record in records:
            if not process.is_alive(record):
                raise _fail(record, "exited during startup")
        await asyncio.sleep(0.2)


def wait_etcd(record: ProcessRecord, client_port: int, timeout_s: float = 30.0) -> None:
    def healthy() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{client_port}/health", timeout=2) as response:
            return bool(json.load(response).get("health") == "true")

    poll(record, healthy, timeout_s)


def wait_apiserver(record: ProcessRecord, server: str, pki: Pki, timeout_s: float = 90.0) -> None:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    request = urllib.request.Request(f"{server}/readyz", headers={"Authorization": f"Bearer {pki.admin_token}"})

    def ready() -> bool:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return bool(response.status == 200)

    poll(record, ready, timeout_s)


def poll(record: ProcessRecord, check: Callable[[], bool], timeout_s: float) -> None:
    """Call ``check`` until it returns True; StartupError if ``record`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while time.monotonic() < deadline:
        if not process.is_alive(record):
            raise _fail(record, "exited during startup")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last_error = str(exc)
        time.sleep(0.2)
    raise _fail(record, f"was not ready after {timeout_s:.0f} s ({last_error})")

"""Start kube-controller-manager with the few controllers the dev cluster needs, and wait for its /healthz.

It runs as a real cluster's does, as the user ``system:kube-controller-manager`` (its own static token and
kubeconfig) with ``--use-service-account-credentials``: it mints a token per controller through the
TokenRequest API, so each controller acts with its own bootstrap RBAC role (a missing permission shows
up here as it would in production). Only an allowlist of controllers runs; docs/devcluster.md says why
each one is in or out. The rest — node lifecycle, node IPAM, pod GC, service-account tokens, Deployments
and friends — would fight kwok, need networking that does not exist, or have no pod scheduler to serve.
"""

from __future__ import annotations

import ssl
import urllib.request
from pathlib import Path

from paralleljob.devcluster import process
from paralleljob.devcluster.certs import Pki
from paralleljob.devcluster.controlplane import poll
from paralleljob.devcluster.state import ProcessRecord

CONTROLLERS = (
    "job-controller",  # Indexed Jobs (and the Jobs JobSet/Kubeflow make) get their pods
    "ttl-after-finished-controller",  # a Job's ttlSecondsAfterFinished is honoured
    "garbage-collector-controller",  # deleting an owner deletes its dependents (ParallelJob -> pods)
    "namespace-controller",  # a deleted namespace is emptied and goes away instead of staying Terminating
    "resourceclaim-controller",  # DRA: ResourceClaimTemplates become per-pod ResourceClaims
    "device-taint-eviction-controller",  # DRA: NoExecute device taints evict pods (gate DRADeviceTaints)
)


def pod_gc_args(threshold: int) -> tuple[str, ...]:
    """Flags that add the pod GC, deleting the oldest terminated pods beyond ``threshold`` (a real cluster's
    default is 12,500) every 20 s, and pods of nodes that no longer exist after 40 s. A second
    ``--controllers`` adds to the list (it is a string slice). Off unless asked for: see docs/devcluster.md."""
    return ("--controllers=pod-garbage-collector-controller", f"--terminated-pod-gc-threshold={threshold}")


# The defaults (20 / 30) would pace the garbage collector and the namespace controller at 20 deletes a
# second per controller; tests tear down hundreds of pods, and nothing else shares this API server.
CLIENT_QPS, CLIENT_BURST = 200, 400


def controller_manager_argv(
    binary: Path, run_dir: Path, pki: Pki, kubeconfig: Path, port: int, extra_args: tuple[str, ...] = ()
) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--controllers={','.join(CONTROLLERS)}",
        "--use-service-account-credentials=true",
        # One instance per cluster: leader election would only add Lease writes and a start-up delay.
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={run_dir / 'kube-controller-manager'}",
        f"--tls-cert-file={pki.controller_manager_cert}",
        f"--tls-private-key-file={pki.controller_manager_key}",
        f"--kube-api-qps={CLIENT_QPS}",
        f"--kube-api-burst={CLIENT_BURST}",
        "--profiling=false",
        "--v=1",
        *extra_args,
    ]


def start_controller_manager(
    binary: Path,
    run_dir: Path,
    pki: Pki,
    kubeconfig: Path,
    port: int,
    die_with_parent: bool = False,
    extra_args: tuple[str, ...] = (),
) -> ProcessRecord:
    argv = controller_manager_argv(binary, run_dir, pki, kubeconfig, port, extra_args)
    log = run_dir / "logs" / "kube-controller-manager.log"
    return process.spawn("kube-controller-manager", argv, log, die_with_parent=die_with_parent)


def wait_controller_manager(record: ProcessRecord, port: int, pki: Pki, timeout_s: float = 60.0) -> None:
    """/healthz needs no credentials. It answers as soon as the server is up, a moment before the controllers
    start (there is no leader election to wait for); they work level-triggered, so objects made meanwhile are
    handled once their informers have listed them."""
    context = ssl.create_default_context(cafile=str(pki.ca_cert))

    def healthy() -> bool:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5, context=context) as response:
            return bool(response.status == 200)

    poll(record, healthy, timeout_s)

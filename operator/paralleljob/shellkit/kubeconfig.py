"""Where a shell's Kubernetes client configuration comes from: a kubeconfig, or the pod's service account.

When neither is there, or the API server does not answer, the message says what to do next (which flag or
variable names a kubeconfig, what to check about the server) rather than repeating the client library's
"Config not found" or an aiohttp exception.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client, config

DEFAULT_KUBECONFIG = "~/.kube/config"

# The commands a user of this project has at hand; the dev cluster's is the one the docs' examples use.
HOW_TO_NAME_ONE = (
    "pass --kubeconfig PATH or set KUBECONFIG=PATH; for the local dev cluster:"
    ' --kubeconfig "$(paralleljob dev-cluster kubeconfig)" (add --name demo for the demo\'s cluster)'
)

DEV_CLUSTER_GONE = (
    "a dev cluster's kubeconfig exists only while that cluster runs (`paralleljob dev-cluster status --name NAME`"
    " says whether it does; `make demo` or `paralleljob dev-cluster up` starts one)"
)


async def load_configuration(kubeconfig: str | None) -> client.Configuration:
    """From ``kubeconfig`` (or $KUBECONFIG / ~/.kube/config), or the in-cluster service account when no
    kubeconfig is named and the process runs in a pod. Raises ``ConfigException`` with what to do."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return configuration
        except config.ConfigException:
            pass
    named = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    paths = [Path(p).expanduser() for p in named.split(os.pathsep) if p]
    if not any(p.is_file() for p in paths):
        where = "no kubeconfig at " + ", ".join(str(p) for p in paths) if paths else "no kubeconfig named"
        inside = "" if kubeconfig else " and not running in a pod"
        # A named file that is gone is most often a stopped dev cluster's (README's after-demo lines export it;
        # `make demo-down` removes it): naming that file again would not help.
        gone = "" if named == DEFAULT_KUBECONFIG else f"; {DEV_CLUSTER_GONE}"
        raise config.ConfigException(f"{where}{inside}: {HOW_TO_NAME_ONE}{gone}")
    try:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except config.ConfigException as exc:
        raise config.ConfigException(f"kubeconfig {named} is not usable ({exc}): {HOW_TO_NAME_ONE}") from exc
    return configuration


def unreachable(server: str, exc: BaseException) -> str:
    """One line for a request that never got an HTTP answer: the server, the cause in words, what to check."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
        cause = "its TLS certificate is not trusted"
        check = "check the kubeconfig's certificate-authority-data for this server"
    elif isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        cause = "no answer in time"
        check = "check that the address is reachable from here (VPN, firewall, proxy) and the server is up"
    else:
        os_error = getattr(exc, "os_error", None) or (exc if isinstance(exc, OSError) else None)
        if isinstance(os_error, ConnectionRefusedError):
            cause = "connection refused"
        elif isinstance(os_error, OSError) and os_error.strerror:
            cause = os_error.strerror.lower()
        else:
            cause = type(exc).__name__
        check = "check that the API server is running and that the kubeconfig names the right server"
    return f"cannot reach the API server at {server} ({cause}): {check} (--kubeconfig or KUBECONFIG)"

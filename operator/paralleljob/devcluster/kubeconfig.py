"""Write the dev cluster's kubeconfigs (the admin's, and kube-controller-manager's own) and open Kubernetes
API clients from them.

A kubeconfig embeds the CA and the bearer token, so it works from any directory and with kubectl, kwok,
kube-controller-manager and kubernetes_asyncio alike.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient


def write_kubeconfig(path: Path, server: str, ca_cert: Path, token: str, context: str, user: str = "admin") -> None:
    user = f"{context}-{user}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        "current-context": context,
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(yaml.safe_dump(config, sort_keys=False))
    temporary.chmod(0o600)
    temporary.replace(path)


@asynccontextmanager
async def api_client(kubeconfig: Path | str) -> AsyncIterator[ApiClient]:
    """A kubernetes_asyncio ApiClient for ``kubeconfig``, closed on exit (aiohttp warns otherwise)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api

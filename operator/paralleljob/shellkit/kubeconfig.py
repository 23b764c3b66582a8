"""Where a shell's Kubernetes client configuration comes from: a kubeconfig, or the pod's service account."""

from __future__ import annotations

from kubernetes_asyncio import client, config


async def load_configuration(kubeconfig: str | None) -> client.Configuration:
    """From ``kubeconfig`` (or $KUBECONFIG / ~/.kube/config), or the in-cluster service account when no
    kubeconfig is named and the process runs in a pod."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return configuration
        except config.ConfigException:
            pass
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return configuration

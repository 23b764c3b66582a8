"""What the e2e modules on Kubernetes' own gang API share: a cluster of their own with the gang API on, and
reading and writing ``scheduling.k8s.io`` objects (PodGroups, Workloads, CompositePodGroups) at the version
the cluster's minor serves."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from kubernetes_asyncio.client import CustomObjectsApi
from tests.e2e.conftest import E2E_CLUSTER_PREFIX, E2E_SHAPE

from paralleljob.devcluster import kubeline
from paralleljob.devcluster.cluster import DevCluster, down, get, up
from paralleljob.devcluster.session import KubeSession

API = ("scheduling.k8s.io", kubeline.selected().gang_api_version)
REUSE = "PARALLELJOB_E2E_NATIVE_CLUSTER"  # a running dev cluster's name: faster when iterating


def own_cluster(label: str, **options: Any) -> Iterator[DevCluster]:
    """A module's own dev cluster (``up`` with ``options``), down when the module ends; or, with
    ``$PARALLELJOB_E2E_NATIVE_CLUSTER`` set, that running cluster, left up."""
    reuse = os.environ.get(REUSE)
    if reuse:
        cluster = get(reuse)
        assert cluster is not None, f"{REUSE}={reuse} but no such dev cluster is running"
        yield cluster
        return
    name = f"{E2E_CLUSTER_PREFIX}{label}-{os.getpid()}"
    cluster = up(name, E2E_SHAPE, report=lambda _: None, die_with_caller=True, **options)
    try:
        yield cluster
    finally:
        down(name, report=lambda _: None)


def create(kube: KubeSession, namespace: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    custom: Any = CustomObjectsApi(kube.api)
    return dict(kube.run(custom.create_namespaced_custom_object(*API, namespace, plural, body)))


def read(kube: KubeSession, namespace: str, plural: str, name: str) -> dict[str, Any]:
    custom: Any = CustomObjectsApi(kube.api)
    return dict(kube.run(custom.get_namespaced_custom_object(*API, namespace, plural, name)))

"""The surface x mode matrix (issue 38), device-plugin mode: a ParallelJob, a pod group (an Indexed Job with
the pod-group label) and an elastic ParallelJob running together, then every user-facing surface read and
compared (``tests/e2e/surfaces.py``). The DRA and NVL72 suites run the same checks on their clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import BatchV1Api
from pjhelpers import Jobs
from tests.e2e.surfaces import check_surfaces, elastic_manifest, pod_group_job

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


def test_every_surface_agrees_on_a_device_plugin_cluster(
    pjs: Jobs, kube: KubeSession, dev_cluster: DevCluster, tmp_path: Path
) -> None:
    batch: Any = BatchV1Api(kube.api)
    pjs.create("rigid", 4, 2, 1)
    kube.run(batch.create_namespaced_job(pjs.namespace, pod_group_job("group", 4, 1, 2)))
    pjs.create_raw(elastic_manifest("elastic", 8, 1, 2))
    for name in ("rigid", "group", "elastic"):
        pjs.wait_phase(name, "Running", timeout_s=60)
    seen = check_surfaces(dev_cluster.kubeconfig, pjs.operator, pjs.namespace, ["rigid", "group", "elastic"], tmp_path)
    assert seen.status["totals"]["total"] == 64 and seen.status["totals"]["used"] == 8 + 8 + 16

"""The surface x mode matrix (issue 38), DRA mode (GPUs in ResourceSlices, none in allocatable): a ParallelJob,
a pod group and an elastic ParallelJob, then every user-facing surface read and compared
(``tests/e2e/surfaces.py``). On this mode the web view showed ``2 nodes (2 down) · 16 GPUs: 0 used, 0 free,
16 failed`` while ``paralleljob status`` was right."""

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


def test_every_surface_agrees_on_a_dra_cluster(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, tmp_path: Path
) -> None:
    batch: Any = BatchV1Api(dra_kube.api)
    dra_pjs.create("rigid", 2, 2, 1)
    dra_kube.run(batch.create_namespaced_job(dra_pjs.namespace, pod_group_job("group", 2, 1, 2)))
    dra_pjs.create_raw(elastic_manifest("elastic", 4, 1, 2))
    for name in ("rigid", "group", "elastic"):
        dra_pjs.wait_phase(name, "Running", timeout_s=60)
    seen = check_surfaces(
        dra_cluster.kubeconfig, dra_pjs.operator, dra_pjs.namespace, ["rigid", "group", "elastic"], tmp_path
    )
    totals = seen.status["totals"]
    assert totals["total"] == 32 and totals["used"] == 4 + 4 + 8 and totals["unhealthy"] == 0
    assert len(seen.snapshot["nodes"]) == 4 and all(n["ready"] for n in seen.snapshot["nodes"].values())

"""The surface x mode matrix (issue 38), NVL72 trays with DRA on a mixed cluster (4 HGX nodes beside 2 racks
of trays): a ParallelJob on whole trays (TP16: wider than every node, over four trays of 4), a ParallelJob on
the HGX nodes, a pod group and an elastic ParallelJob (those two never take trays), then every user-facing
surface read and compared (``tests/e2e/surfaces.py``). On this mode the web view and ``describe`` crashed
on the tray job."""

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


def test_every_surface_agrees_on_a_mixed_hgx_and_nvl72_cluster(
    nvl72_pjs: Jobs, nvl72_kube: KubeSession, nvl72_cluster: DevCluster, tmp_path: Path
) -> None:
    pjs = nvl72_pjs
    batch: Any = BatchV1Api(nvl72_kube.api)
    pjs.create("trays", 16, 1, 1, gpuMemoryGiB=10)  # TP16 is wider than every node: whole trays of a clique
    pjs.create("hgx", 4, 1, 2, gpuMemoryGiB=10)
    nvl72_kube.run(batch.create_namespaced_job(pjs.namespace, pod_group_job("group", 4, 1, 2)))
    pjs.create_raw(elastic_manifest("elastic", 4, 1, 2))
    names = ["trays", "hgx", "group", "elastic"]
    for name in names:
        pjs.wait_phase(name, "Running", timeout_s=90)
    assert pjs.status("trays")["placement"].get("layout") == "trays"
    seen = check_surfaces(nvl72_cluster.kubeconfig, pjs.operator, pjs.namespace, names, tmp_path)
    assert seen.status["totals"]["used"] == 16 + 8 + 8 + 8
    # the tray job's slots in the web view: one per tray, all of its one TP group, each rank once
    (tray_job,) = [j for j in seen.snapshot["jobs"] if j["key"] == f"{pjs.namespace}/trays"]
    assert len(tray_job["slots"]) == 4 and {(s["replica"], s["stage"], s["group"]) for s in tray_job["slots"]} == {
        (0, 0, 0)
    }
    assert sorted(r for s in tray_job["slots"] for r in s["ranks"]) == list(range(16))

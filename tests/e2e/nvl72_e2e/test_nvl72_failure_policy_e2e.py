"""A tray job's failure policy on the real API (issue 39): a TP16 job (wider than every HGX node, so it takes
4 whole trays of one clique) with ``maxRestarts: 0`` whose tray reports an unhealthy GPU fails with the
reason, instead of being repaired onto a spare as it was before the tray repair went through
``core.failure.repair.decide_repair``; its pods are deleted and its trays freed."""

from __future__ import annotations

import pytest
from pjhelpers import Jobs, wait_for

from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.status.records import record_from_status

pytestmark = pytest.mark.e2e


def test_a_tray_job_at_max_restarts_fails_when_its_tray_breaks(nvl72_kube: KubeSession, nvl72_pjs: Jobs) -> None:
    kube, pjs = nvl72_kube, nvl72_pjs
    pjs.create("brittle", 16, 1, 1, gpuMemoryGiB=10, failurePolicy={"maxRestarts": 0})
    status = pjs.wait_phase("brittle", "Running", timeout_s=60)
    record = record_from_status(status)
    assert record is not None and len(record.trays) == 4, status.get("placement")
    victim = record.trays[1]
    kube.set_unhealthy_gpus(victim.node, [victim.gpu_indices[0]])
    try:
        failed = pjs.wait_phase("brittle", "Failed", timeout_s=60)
        assert "maxRestarts 0 reached" in failed["message"], failed["message"]
        failure = failed["lastFailure"]
        assert failure["kind"] == "GPUFailure" and failure["action"] == "failed", failure
        assert failure["pods"] == [victim.name] and failure["nodes"] == [victim.node], failure
        assert failed.get("restarts", 0) == 0, "giving up restarts nothing"
        wait_for("the failed job's pods deleted", lambda: not pjs.pods("brittle"), 30)
    finally:
        kube.set_unhealthy_gpus(victim.node, [])

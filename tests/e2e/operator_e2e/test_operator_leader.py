"""Leader election through a coordination.k8s.io Lease: one replica acts, a standby takes over when the
leader goes away."""

from __future__ import annotations

import pytest
from pjhelpers import Jobs, OperatorProcess, assert_gang_on_record, wait_for

pytestmark = pytest.mark.e2e


def test_standby_takes_over_when_the_leader_stops(pjs: Jobs, pj_operator: OperatorProcess) -> None:
    standby = OperatorProcess(pj_operator.kubeconfig, pj_operator.log_dir, identity="e2e-standby")
    standby.start(wait=False)
    try:
        wait_for("the standby's metrics", lambda: _leader_value(standby) is not None)
        assert _leader_value(standby) == 0.0, "only one replica may lead"
        pj_operator.stop()  # a clean stop releases the lease
        standby.wait_leader(timeout_s=60)
        pjs.create("after-failover", 2, 2, 1)
        pjs.wait_phase("after-failover", "Running")
        assert_gang_on_record(pjs, "after-failover")
    finally:
        standby.stop()
        pj_operator.ensure_running()


def _leader_value(proc: OperatorProcess) -> float | None:
    try:
        for line in proc.metrics().splitlines():
            if line.startswith("paralleljob_leader "):
                return float(line.split()[1])
    except OSError:
        return None
    return None

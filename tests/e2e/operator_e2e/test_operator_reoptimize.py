"""A repaired job is moved back at its next checkpoint, once, and the operator settles (issue 21).

The user's story: GPU 1 of a node fails (the agent's ``unhealthy-gpus``) under a TP4xPP2xDP2 job. The
minimal repair moves the TP group on that GPU to another node, so stage 0's DP all-reduce leaves NVLink; the
placer can do better at once (both stage-0 groups together on a free node). The operator must propose that once (one
``Reoptimizable`` Event, ``status.reoptimization`` kept by the API server), move the gang when the job
reports a checkpoint after the proposal, and go back to idle: before the CRD declared those fields, it
re-wrote them 60-90 times a second and never migrated.
"""

from __future__ import annotations

import datetime as dt
import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest
from pjhelpers import Jobs, assert_gang_on_record, assert_no_gpu_used_twice, wait_for

from paralleljob.cli import main
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import GROUP, LAST_CHECKPOINT_ANNOTATION, PLURAL, UNHEALTHY_GPUS_ANNOTATION, VERSION

pytestmark = pytest.mark.e2e

SEED_COST_MS = 233.710821  # TP4xPP2xDP2, each stage's two replicas on one node: DP over NVLink


def cli(cluster: DevCluster, *args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*args, "--kubeconfig", str(cluster.kubeconfig)])
    assert code in (0, None), f"paralleljob {' '.join(args)} exited {code}: {err.getvalue()}"
    return out.getvalue()


def mark_unhealthy(kube: KubeSession, node: str, gpus: str | None) -> None:
    patch = {"metadata": {"annotations": {UNHEALTHY_GPUS_ANNOTATION: gpus}}}
    kube.run(kube.core.patch_node(node, patch))


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), {})


def test_a_drained_gpu_repair_is_proposed_once_then_migrated_at_the_checkpoint(
    pjs: Jobs, chaos: KubeSession, dev_cluster: DevCluster
) -> None:
    spec = {"checkpoint": {"intervalSeconds": 3600}, "failurePolicy": {"reoptimize": "MigrateAtCheckpoint"}}
    pjs.create("llama", 4, 2, 2, gpuMemoryGiB=70, **spec)
    before = pjs.wait_phase("llama", "Running")
    assert abs(before["communicationCost"]["totalMs"] - SEED_COST_MS) < 1e-3
    node = next(p["node"] for p in before["placement"]["pods"] if p["stage"] == 0 and 1 in p["gpuIndices"])
    try:
        # a real GPU failure, as the health agent writes it (a drain is maintenance: tests/e2e/operator_e2e/
        # test_operator_drain.py)
        mark_unhealthy(chaos, node, "1")
        repaired = pjs.wait_phase("llama", "Running", restarts=1)
        assert repaired["communicationCost"]["totalMs"] > 2 * SEED_COST_MS, repaired["communicationCost"]

        def proposed() -> dict[str, Any] | None:
            status = pjs.status("llama")
            return status if (status.get("reoptimization") or {}).get("proposedAt") else None

        status = wait_for("status.reoptimization.proposedAt", proposed, timeout_s=20)
        assert condition(status, "Reoptimizable")["status"] == "True", condition(status, "Reoptimizable")
        assert abs(status["reoptimization"]["bestCostMs"] - SEED_COST_MS) < 1e-3
        # the job checkpoints after the proposal: the operator moves it there
        stamp = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"metadata": {"annotations": {LAST_CHECKPOINT_ANNOTATION: stamp}}}
        pjs.kube.run(
            pjs.custom.patch_namespaced_custom_object(
                GROUP, VERSION, pjs.namespace, PLURAL, "llama", patch, _content_type="application/merge-patch+json"
            )
        )

        def migrated() -> dict[str, Any] | None:
            status = pjs.status("llama")
            return status if status.get("lastMigration") and status.get("phase") == "Running" else None

        after = wait_for("the migration", migrated, timeout_s=30)
        assert abs(after["communicationCost"]["totalMs"] - SEED_COST_MS) < 1e-3
        assert after["lastMigration"]["costAfterMs"] < after["lastMigration"]["costBeforeMs"]
        # priced again after the move (it is where the placer would put it now)
        assert condition(after, "Reoptimizable")["status"] == "False"
        assert condition(after, "Reoptimizable")["reason"] in ("Migrated", "AtBestPlacement")
        assert_gang_on_record(pjs, "llama")
        assert_no_gpu_used_twice(pjs.kube)
        # the Events of the repair and the move all land (they were starved by the loop before)
        pjs.wait_events("llama", {"GPUFailure", "Rescheduled", "Repaired", "Reoptimizable", "Migrated"})
        reasons = [e.reason for e in pjs.events("llama") for _ in range(e.count or 1)]
        assert reasons.count("Reoptimizable") == 1, reasons
        assert reasons.count("Migrated") == 1, reasons
    finally:
        mark_unhealthy(chaos, node, None)

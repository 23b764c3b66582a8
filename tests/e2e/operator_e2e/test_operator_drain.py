"""``paralleljob drain`` is maintenance on the real API server (issue 38, item 3): the job on the drained node
gets the checkpoint-now signal before any pod moves, moves after it reports a checkpoint with no restart
counted, a Normal ``Drained`` Event and no ``GPUFailure``, and moves back after ``undrain``.

The story is the issue's: one GPU under a TP4xPP2xDP2 job is drained (``drain --gpu NODE:IDX``); the minimal
move takes that TP group to another node, so stage 0's DP all-reduce leaves NVLink (far dearer), and the job
goes back where it ran once the GPU is back.
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
from paralleljob.k8s.edge.constants import (
    CHECKPOINT_REQUESTED_ANNOTATION,
    GROUP,
    LAST_CHECKPOINT_ANNOTATION,
    PLURAL,
    VERSION,
)

pytestmark = pytest.mark.e2e


def cli(cluster: DevCluster, *args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*args, "--kubeconfig", str(cluster.kubeconfig)])
    assert code in (0, None), f"paralleljob {' '.join(args)} exited {code}: {err.getvalue()}"
    return out.getvalue()


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), {})


def checkpointed(pjs: Jobs, name: str) -> None:
    """What the training code does once its checkpoint is written: stamp it on its ParallelJob."""
    stamp = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {"metadata": {"annotations": {LAST_CHECKPOINT_ANNOTATION: stamp}}}
    pjs.kube.run(
        pjs.custom.patch_namespaced_custom_object(
            GROUP, VERSION, pjs.namespace, PLURAL, name, patch, _content_type="application/merge-patch+json"
        )
    )


def test_a_drain_asks_for_a_checkpoint_moves_without_a_restart_and_moves_back_after_undrain(
    pjs: Jobs, chaos: KubeSession, dev_cluster: DevCluster
) -> None:
    pjs.create("maint", 4, 2, 2, gpuMemoryGiB=70)  # no checkpoint interval: only the signal and its answer
    before = pjs.wait_phase("maint", "Running", timeout_s=60)
    home = {p["name"]: p["node"] for p in before["placement"]["pods"]}
    slot = next(p for p in before["placement"]["pods"] if p["stage"] == 0)
    node, gpu = slot["node"], slot["gpuIndices"][0]
    try:
        cli(dev_cluster, "drain", "--gpu", f"{node}:{gpu}")

        def asked() -> dict[str, Any] | None:
            status = pjs.status("maint")
            return status if condition(status, "DrainPending").get("status") == "True" else None

        status = wait_for("DrainPending on the job", asked, timeout_s=60)
        deadline = status["drain"]["deadline"]
        # the checkpoint signal first: every pod has it while the pods on the node still run there
        wait_for(
            "the checkpoint signal on every pod",
            lambda: all(
                (p.metadata.annotations or {}).get(CHECKPOINT_REQUESTED_ANNOTATION) == deadline
                for p in pjs.pods("maint")
            ),
            timeout_s=60,
        )
        still = pjs.status("maint")
        assert "lastDrain" not in still and still.get("restarts", 0) == 0
        assert {p["name"]: p["node"] for p in still["placement"]["pods"]} == home, "nothing moved before the ask"

        checkpointed(pjs, "maint")

        def moved() -> dict[str, Any] | None:
            status = pjs.status("maint")
            pods = (status.get("placement") or {}).get("pods") or []
            held = {(p["node"], i) for p in pods for i in p["gpuIndices"]}
            off = status.get("phase") == "Running" and pods and (node, gpu) not in held
            return status if off and status.get("lastDrain") else None

        after = wait_for("the job moved off the drained GPU", moved, timeout_s=120)
        assert after.get("restarts", 0) == 0, "a drain is not counted against maxRestarts"
        assert "lastFailure" not in after and after["lastDrain"]["kind"] == "Drained"
        assert after["lastDrain"]["costAfterMs"] > after["lastDrain"]["costBeforeMs"], after["lastDrain"]
        pjs.wait_events("maint", {"DrainPending", "Drained"}, timeout_s=60)
        kinds = {(e.reason, e.type) for e in pjs.events("maint")}
        assert ("Drained", "Normal") in kinds and ("DrainPending", "Normal") in kinds, kinds
        assert not {r for r, t in kinds if r in ("GPUFailure", "NodeFailure")}, kinds
        assert_gang_on_record(pjs, "maint")
    finally:
        cli(dev_cluster, "undrain", "--gpu", f"{node}:{gpu}")

    # back to the cost it had: re-priced within a minute, asked to checkpoint, moved after it (or the grace).
    # The checkpoint that ended the drain may already be past the proposal made right after the move, so the
    # move back (to the best placement, home or an equal one) may have happened before the undrain.
    def settled_back() -> dict[str, Any] | None:
        status = pjs.status("maint")
        cost = (status.get("communicationCost") or {}).get("totalMs")
        at_best = cost is not None and abs(cost - before["communicationCost"]["totalMs"]) < 1e-3
        return status if at_best and status.get("lastMigration") and status.get("phase") == "Running" else None

    def proposed() -> dict[str, Any] | None:
        status = pjs.status("maint")
        return status if settled_back() or (status.get("reoptimization") or {}).get("proposedAt") else None

    wait_for("the move back proposed", proposed, timeout_s=180)
    checkpointed(pjs, "maint")
    home_again = wait_for("the job moved back to its best cost", settled_back, timeout_s=180)
    assert abs(home_again["communicationCost"]["totalMs"] - before["communicationCost"]["totalMs"]) < 1e-3
    assert home_again.get("restarts", 0) == 0
    assert_gang_on_record(pjs, "maint")
    assert_no_gpu_used_twice(pjs.kube)
    pjs.delete("maint")

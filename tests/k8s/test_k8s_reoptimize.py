"""Re-optimisation in the operator: a repair that left a job expensive is proposed for a move once cheaper
room is back, and moved (whole gang, at a checkpoint boundary) only when the job's policy says so."""

from __future__ import annotations

from collections import Counter
from typing import Any

from paralleljob.core.reoptimize import RECHECK_SECONDS
from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.actions import Plan
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster

SEED_COST_MS = 233.710821  # TP4xPP2xDP2 with each stage's two replicas sharing a node: DP over NVLink


# The repair's own passes (t=10) already priced the job, with the node still down; a minute later it is
# priced again with the node back.
PROPOSE_AT = 10 + int(RECHECK_SECONDS) + 1


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def condition(fc: FakeCluster, ctype: str) -> dict[str, Any]:
    return next(c for c in fc.job("ns/seed")["status"]["conditions"] if c["type"] == ctype)


def no_gpu_twice(fc: FakeCluster) -> None:
    used: Counter[tuple[str, str]] = Counter()
    for pod in fc.pods.values():
        if pod["spec"].get("nodeName") and pod["metadata"].get("annotations", {}).get("paralleljob.dev/gpu-indices"):
            for i in pod["metadata"]["annotations"]["paralleljob.dev/gpu-indices"].split(","):
                used[(pod["spec"]["nodeName"], i)] += 1
    assert all(n == 1 for n in used.values()), used


def repaired_expensively(
    reoptimize: str | None = "Propose", checkpoint: dict[str, Any] | None = None
) -> tuple[FakeCluster, str]:
    """The seed job on a, b; c and d half taken by someone else; a fails, so its two stage-0 groups must
    split over c and d: the DP all-reduce of stage 0 leaves NVLink. Then a comes back."""
    fc = FakeCluster([node(n, leaf="leaf-00") for n in ("a", "b", "c", "d")])
    fc.pods[("other", "x")] = foreign_pod("x", "c", 4)
    fc.pods[("other", "y")] = foreign_pod("y", "d", 4)
    spec: dict[str, Any] = {"checkpoint": {"intervalSeconds": 3600} if checkpoint is None else checkpoint}
    if reoptimize is not None:
        spec["failurePolicy"] = {"reoptimize": reoptimize}
    fc.add_job(paralleljob("seed", 4, 2, 2, memory=70.0, extra_spec=spec))
    for _ in range(4):
        fc.step(at(0))
    first = record_from_status(fc.job("ns/seed")["status"])
    assert first is not None and first.cost is not None and abs(first.cost.total_ms - SEED_COST_MS) < 1e-3
    stage0 = next(s.node for s in first.slots if s.stage == 0)
    fc.nodes[stage0] = node(stage0, leaf="leaf-00", ready=False)
    for _ in range(4):
        fc.step(at(10))
    repaired = record_from_status(fc.job("ns/seed")["status"])
    assert repaired is not None and repaired.cost is not None and fc.phase("ns/seed") == "Running"
    assert repaired.cost.total_ms > 5 * SEED_COST_MS, "the repair had to split stage 0 over c and d"
    fc.nodes[stage0] = node(stage0, leaf="leaf-00")  # healed
    return fc, stage0


def test_a_worthwhile_move_is_proposed_and_not_made_by_default() -> None:
    fc, _ = repaired_expensively()
    before = fc.job("ns/seed")["status"]["placement"]
    fc.step(at(PROPOSE_AT))
    cond = condition(fc, "Reoptimizable")
    assert cond["status"] == "True" and cond["reason"] == "CheaperPlacement", cond
    reopt = fc.job("ns/seed")["status"]["reoptimization"]
    assert abs(reopt["bestCostMs"] - SEED_COST_MS) < 1e-3 and reopt["podsToMove"] >= 1 and reopt["proposedAt"]
    assert any(reason == "Reoptimizable" for key, reason, _ in fc.events if key == "ns/seed")
    fc.job("ns/seed")["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(600)}
    for t in (700, 800, 900):
        fc.step(at(t))
    assert fc.job("ns/seed")["status"]["placement"] == before, "Propose never moves a job"
    assert fc.phase("ns/seed") == "Running"


def _repriced(plan: Plan) -> bool:
    return next(a for a in plan.jobs if a.job.key == "ns/seed").repriced is not None


def test_rechecks_are_rate_limited_and_the_same_verdict_is_not_written_again() -> None:
    fc, healed = repaired_expensively()
    assert _repriced(fc.step(at(PROPOSE_AT)))
    written = fc.job("ns/seed")["status"]["reoptimization"]
    assert written["checkedAt"] == at(PROPOSE_AT)
    assert not _repriced(fc.step(at(PROPOSE_AT + int(RECHECK_SECONDS) - 5)))
    # priced again a minute later, to the same verdict: nothing to write (checkedAt: when it was reached)
    plan = fc.step(at(PROPOSE_AT + int(RECHECK_SECONDS) + 5))
    assert _repriced(plan) and not next(a for a in plan.jobs if a.job.key == "ns/seed").writes_status
    assert fc.job("ns/seed")["status"]["reoptimization"] == written
    assert not _repriced(fc.step(at(PROPOSE_AT + int(RECHECK_SECONDS) + 30))), "the runtime's stamp holds it back"
    # a verdict that changes is written: the cheaper room goes
    fc.pods[("other", "blocker")] = foreign_pod("blocker", healed, 8)
    fc.step(at(PROPOSE_AT + 2 * int(RECHECK_SECONDS) + 10))
    after = fc.job("ns/seed")["status"]["reoptimization"]
    assert after["checkedAt"] == at(PROPOSE_AT + 2 * int(RECHECK_SECONDS) + 10) and after != written


def test_migrate_at_checkpoint_moves_the_gang_back_after_the_next_checkpoint_only() -> None:
    fc, healed = repaired_expensively("MigrateAtCheckpoint")
    fc.step(at(PROPOSE_AT))  # proposed now
    assert condition(fc, "Reoptimizable")["status"] == "True"
    fc.job("ns/seed")["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(PROPOSE_AT - 5)}  # before it
    fc.step(at(PROPOSE_AT + 30))
    assert fc.phase("ns/seed") == "Running", "no checkpoint since the proposal: it keeps running"
    restarts = fc.job("ns/seed")["status"]["restarts"]
    fc.job("ns/seed")["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(PROPOSE_AT + 40)}
    plan = fc.step(at(PROPOSE_AT + 50))
    assert fc.phase("ns/seed") == "Recovering"
    moved = next(a for a in plan.jobs if a.job.key == "ns/seed")
    assert moved.migrated and {d.name for d in moved.deletes} == {f"seed-d{d}-p{p}" for d in (0, 1) for p in (0, 1)}
    for _ in range(4):
        fc.step(at(PROPOSE_AT + 51))
    status = fc.job("ns/seed")["status"]
    after = record_from_status(status)
    assert after is not None and after.cost is not None and abs(after.cost.total_ms - SEED_COST_MS) < 1e-3
    assert fc.phase("ns/seed") == "Running" and healed in after.nodes
    assert status["restarts"] == restarts, "a migration is not a failure"
    assert status["lastMigration"]["costAfterMs"] == round(SEED_COST_MS, 6)
    assert any(reason == "Migrated" for key, reason, _ in fc.events if key == "ns/seed")
    # priced again once running: nothing left to gain
    assert condition(fc, "Reoptimizable")["reason"] == "AtBestPlacement"
    assert status["reoptimization"]["podsToMove"] == 0 and "proposedAt" not in status["reoptimization"]
    assert {p["spec"]["nodeName"] for p in fc.job_pods("ns/seed")} == set(after.nodes)
    no_gpu_twice(fc)


def test_by_default_a_job_that_declares_no_checkpoints_is_never_moved() -> None:
    fc, _ = repaired_expensively(reoptimize=None, checkpoint={})
    assert fc.job("ns/seed")["spec"].get("failurePolicy", {}).get("reoptimize") is None  # the default applies
    before = fc.job("ns/seed")["status"]["placement"]
    for t in (PROPOSE_AT, PROPOSE_AT + 2 * int(RECHECK_SECONDS)):
        fc.step(at(t))
    cond = condition(fc, "Reoptimizable")
    assert cond["status"] == "False" and "never checkpoints" in cond["message"], cond
    assert fc.job("ns/seed")["status"]["placement"] == before


def test_by_default_a_job_with_a_checkpoint_interval_moves_back() -> None:
    fc, healed = repaired_expensively(reoptimize=None)
    fc.step(at(PROPOSE_AT))
    assert condition(fc, "Reoptimizable")["status"] == "True"
    # no annotation: the boundary is the latest multiple of intervalSeconds (3600 s) since the job started
    for t in (3600 + 5, 3600 + 6, 3600 + 7, 3600 + 8):
        fc.step(at(t))
    after = record_from_status(fc.job("ns/seed")["status"])
    assert after is not None and after.cost is not None and abs(after.cost.total_ms - SEED_COST_MS) < 1e-3
    assert healed in after.nodes and fc.phase("ns/seed") == "Running"


def test_reoptimization_stamps_are_rfc3339_and_old_float_stamps_still_read() -> None:
    """``kubectl describe pj`` showed ``Checked At: 1.796164943812e+09``: the stamps are written as every time
    in the status is (RFC 3339), and a float an older operator wrote keeps its meaning."""
    fc, _ = repaired_expensively()
    fc.step(at(PROPOSE_AT))
    reopt = fc.job("ns/seed")["status"]["reoptimization"]
    assert reopt["checkedAt"] == reopt["proposedAt"] == at(PROPOSE_AT)
    # as an older operator left it: Unix seconds, checked 5 s ago, proposed 20 s ago
    epoch = 1704067200  # at(0)
    reopt["checkedAt"], reopt["proposedAt"] = float(epoch + PROPOSE_AT), float(epoch + PROPOSE_AT - 20)
    fc.step(at(PROPOSE_AT + 5))
    assert fc.job("ns/seed")["status"]["reoptimization"]["checkedAt"] == float(epoch + PROPOSE_AT), "rate limited"
    fc.step(at(PROPOSE_AT + int(RECHECK_SECONDS) + 1))
    reopt = fc.job("ns/seed")["status"]["reoptimization"]
    assert reopt["checkedAt"] == at(PROPOSE_AT + int(RECHECK_SECONDS) + 1)
    assert reopt["proposedAt"] == at(PROPOSE_AT - 20), "the proposal keeps its time, now as a stamp"

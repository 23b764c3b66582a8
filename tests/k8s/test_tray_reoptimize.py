"""A tray job is re-optimised at its checkpoint like an HGX job (issue 39: "tray records are never
re-optimised"). A failed tray in a clique with no spare sends only the broken TP group to the other rack
(``core/nvl72/traymoves``), so the job's DP all-reduce crosses the spine; once the tray is back, the move to one
clique is proposed, made at the job's next checkpoint (every tray pod restarts there), and the ComputeDomain
of the clique it left goes."""

from __future__ import annotations

from typing import Any

from paralleljob.core.reoptimize import RECHECK_SECONDS
from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster

KEY = "ns/llm"


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def record(fc: FakeCluster) -> PlacementRecord:
    found = record_from_status(fc.job(KEY)["status"])
    assert found is not None and found.trays and found.cost is not None, fc.job(KEY)["status"]
    return found


def condition(fc: FakeCluster, ctype: str) -> dict[str, Any]:
    return next(c for c in fc.job(KEY)["status"]["conditions"] if c["type"] == ctype)


def domain_cliques(fc: FakeCluster) -> set[str]:
    return {body["metadata"]["annotations"][cd.CLIQUE_ANNOTATION] for body in fc.compute_domains.values()}


def test_a_tray_job_split_over_two_cliques_by_a_repair_moves_back_into_one_at_its_checkpoint() -> None:
    fc = FakeCluster([
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(2) for t in range(6)
    ])  # fmt: skip
    fc.add_job(paralleljob("llm", 8, 1, 2, memory=10.0, extra_spec={"checkpoint": {"intervalSeconds": 3600}}))
    for _ in range(4):
        fc.step(at(0))
    first = record(fc)
    assert len({t.clique for t in first.trays}) == 1
    used = {t.node for t in first.trays}
    rack = first.trays[0].node.split("-")[0]
    for n, free in enumerate(sorted(f"{rack}-t{t:02d}" for t in range(6) if f"{rack}-t{t:02d}" not in used)):
        fc.pods[("other", f"x{n}")] = foreign_pod(f"x{n}", free, 4)  # the rest of its rack taken: no spare
    broken = first.trays[-1].node
    fc.nodes[broken]["status"]["conditions"][0]["status"] = "False"
    for _ in range(4):
        fc.step(at(10))
    split = record(fc)
    assert fc.phase(KEY) == "Running" and len({t.clique for t in split.trays}) == 2, split.trays
    assert split.cost is not None and first.cost is not None and split.cost.total_ms > first.cost.total_ms
    restarts = fc.job(KEY)["status"]["restarts"]
    fc.nodes[broken]["status"]["conditions"][0]["status"] = "True"  # healed
    propose_at = 10 + int(RECHECK_SECONDS) + 1
    fc.step(at(propose_at))
    assert condition(fc, "Reoptimizable")["status"] == "True", condition(fc, "Reoptimizable")
    assert fc.job(KEY)["status"]["reoptimization"]["podsToMove"] == 2  # one TP8 group's two trays
    fc.job(KEY)["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(propose_at + 40)}
    plan = fc.step(at(propose_at + 50))
    moved = next(a for a in plan.jobs if a.job.key == KEY)
    assert moved.migrated and fc.phase(KEY) == "Recovering"
    for t in range(6):
        fc.step(at(propose_at + 51 + t))
    after = record(fc)
    status = fc.job(KEY)["status"]
    assert fc.phase(KEY) == "Running" and len({t.clique for t in after.trays}) == 1, after.trays
    assert after.cost is not None and abs(after.cost.total_ms - first.cost.total_ms) < 1e-6
    assert status["restarts"] == restarts, "a migration is not a failure"
    assert status["lastMigration"]["podsMoved"] == 2
    assert {p["spec"]["nodeName"] for p in fc.job_pods(KEY)} == {t.node for t in after.trays}
    assert domain_cliques(fc) == {after.trays[0].clique}, "the clique it left keeps no ComputeDomain of it"
    assert condition(fc, "Reoptimizable")["reason"] == "AtBestPlacement"

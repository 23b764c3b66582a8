"""A tray job's broken or drained tray goes through the job's failure policy (core.failure.repair.decide_repair), as an
HGX job's node does (issue 39): maxRestarts reached fails the job, ``onUnplaceable: Fail`` fails it when no
clique has room, every repair counts one restart, the failure kind is typed (NodeFailure / GPUFailure), the
strategy decides which pods are re-created, and a drained tray is maintenance (checkpoint first, no restart)."""

from __future__ import annotations

from typing import Any

from paralleljob.k8s.edge.constants import CHECKPOINT_REQUESTED_ANNOTATION, UNHEALTHY_GPUS_ANNOTATION
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from paralleljob.k8s.plan.actions import Plan
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster, drain_node

KEY = "ns/llm"


def _cluster(trays: int = 6, racks: int = 2) -> FakeCluster:
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(racks)
        for t in range(trays)
    ]
    return FakeCluster(nodes)  # no HGX node: a TP8 group must take two trays of one clique


def _record(fc: FakeCluster) -> PlacementRecord:
    record = record_from_status(fc.job(KEY)["status"])
    assert record is not None and record.trays, fc.job(KEY)["status"]
    return record


def _running(fc: FakeCluster, **job: Any) -> PlacementRecord:
    fc.add_job(paralleljob("llm", 8, 1, 2, memory=10.0, **job))  # 2 TP8 groups: 4 whole trays
    for _ in range(4):
        fc.step()
    assert fc.phase(KEY) == "Running", fc.job(KEY)["status"]
    return _record(fc)


def _status(fc: FakeCluster) -> dict[str, Any]:
    return fc.job(KEY)["status"]


def _events(plan: Plan) -> list[tuple[str, str]]:
    return [(e.event_type, e.reason) for a in plan.jobs if a.job.key == KEY for e in a.events]


def _not_ready(fc: FakeCluster, name: str) -> None:
    fc.nodes[name]["status"]["conditions"][0]["status"] = "False"


def test_max_restarts_reached_fails_a_tray_job_instead_of_repairing_it() -> None:
    fc = _cluster()
    record = _running(fc, max_restarts=0)
    _not_ready(fc, record.trays[0].node)
    plan = fc.step()
    st = _status(fc)
    assert st["phase"] == "Failed", st
    assert "maxRestarts 0 reached" in st["message"], st["message"]
    assert st["lastFailure"]["action"] == "failed" and st["lastFailure"]["kind"] == "NodeFailure"
    assert st.get("restarts", 0) == 0, "giving up restarts nothing"
    assert ("Warning", "Failed") in _events(plan)
    fc.step()
    assert not fc.job_pods(KEY), "a failed job's pods are deleted"


def test_on_unplaceable_fail_fails_a_tray_job_when_no_clique_has_a_free_tray() -> None:
    fc = _cluster(trays=2)
    record = _running(fc, on_unplaceable="Fail")  # both cliques full: no spare tray anywhere
    _not_ready(fc, record.trays[0].node)
    fc.step()
    st = _status(fc)
    assert st["phase"] == "Failed", st
    assert "no room to repair inside the NVLink cliques" in st["message"], st["message"]
    assert st["lastFailure"]["action"] == "failed" and st["restarts"] == 1


def test_a_tray_repair_counts_one_restart_and_types_the_failure() -> None:
    fc = _cluster()
    record = _running(fc)
    victim = record.trays[0]
    fc.nodes[victim.node]["metadata"].setdefault("annotations", {})[UNHEALTHY_GPUS_ANNOTATION] = "2"
    plan = fc.step()
    st = _status(fc)
    assert st["restarts"] == 1, st
    assert st["lastFailure"]["kind"] == "GPUFailure" and st["lastFailure"]["reason"] == "GPUFailure"
    assert st["lastFailure"]["action"] == "rescheduled" and st["lastFailure"]["pods"] == [victim.name]
    assert ("Warning", "GPUFailure") in _events(plan)
    del fc.nodes[_record(fc).trays[1].node]  # a second failure, a gone tray this time
    fc.step()
    st = _status(fc)
    assert st["restarts"] == 2 and st["lastFailure"]["kind"] == "NodeFailure", st


def test_max_restarts_counts_tray_repairs_across_failures() -> None:
    fc = _cluster()
    _running(fc, max_restarts=1)
    _not_ready(fc, _record(fc).trays[0].node)
    fc.step()
    assert _status(fc)["restarts"] == 1 and _status(fc)["phase"] != "Failed"
    fc.settle()
    _not_ready(fc, _record(fc).trays[1].node)
    fc.step()
    assert _status(fc)["phase"] == "Failed" and "maxRestarts 1 reached" in _status(fc)["message"]


def test_full_strategy_re_creates_every_tray_pod_minimal_only_the_broken_one() -> None:
    for strategy, expected in (("minimal", 1), ("full", 4)):
        fc = _cluster()
        record = _running(fc, strategy=strategy)
        del fc.nodes[record.trays[0].node]
        fc.step()
        after = _record(fc)
        restarted = [t.name for t in after.trays if t.incarnation == after.epoch]
        assert len(restarted) == expected, (strategy, restarted)
        assert record.trays[0].name in restarted
        assert {t.clique for t in after.trays} == {t.clique for t in record.trays}, "repaired inside the clique"


def test_a_drained_tray_checkpoints_first_then_moves_without_a_restart() -> None:
    fc = _cluster()
    record = _running(fc)
    victim = record.trays[0]
    drain_node(fc, victim.node)
    first = fc.step()
    st = _status(fc)
    assert st["phase"] == "Running" and st.get("restarts", 0) == 0 and "drain" in st, st
    assert ("Normal", "DrainPending") in _events(first)
    assert all(CHECKPOINT_REQUESTED_ANNOTATION in p["metadata"].get("annotations", {}) for p in fc.job_pods(KEY))
    assert victim.node in _record(fc).nodes, "the pods keep running until the checkpoint or the deadline"
    for _ in range(40):  # past the 30 s grace period
        moved = fc.step()
        if "lastDrain" in _status(fc):
            break
    st = _status(fc)
    assert st["lastDrain"]["kind"] == "Drained" and st["lastDrain"]["action"] == "rescheduled", st
    assert st.get("restarts", 0) == 0 and "lastFailure" not in st
    assert not [e for e in _events(moved) if e[0] == "Warning"], _events(moved)
    assert victim.node not in _record(fc).nodes
    fc.settle()
    assert fc.phase(KEY) == "Running" and _status(fc).get("restarts", 0) == 0


def test_a_tray_drained_now_moves_at_once_even_at_max_restarts() -> None:
    fc = _cluster()
    record = _running(fc, max_restarts=0)
    drain_node(fc, record.trays[0].node, now=True)
    fc.step()
    st = _status(fc)
    assert st["phase"] != "Failed" and st.get("restarts", 0) == 0, st
    assert "at once (drain --now)" in st["lastDrain"]["message"]
    assert record.trays[0].node not in _record(fc).nodes


def test_a_tray_repair_keeps_to_the_nodes_the_job_selects() -> None:
    """A broken tray's replacement honours the job's nodeSelector, as an HGX repair does: with no spare left
    in the selected clique the job waits for room there instead of being re-placed on the other rack."""
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r, trays in ((0, 4), (1, 6))
        for t in range(trays)
    ]
    fc = FakeCluster(nodes)
    template = {"spec": {"nodeSelector": {cd.CLIQUE_LABEL: "uuid.0"}, "containers": [{"name": "t", "image": "x"}]}}
    record = _running(fc, extra_spec={"template": template})
    assert {t.clique for t in record.trays} == {"uuid.0"}, record.trays
    _not_ready(fc, record.trays[0].node)
    for _ in range(3):
        fc.step()
    st = _status(fc)
    placed = (st.get("placement") or {}).get("pods") or []
    assert not any(p["node"].startswith("r1-") for p in placed), placed
    assert not any((p.get("spec") or {}).get("nodeName", "").startswith("r1-") for p in fc.job_pods(KEY))
    assert st["phase"] in ("Queued", "Pending"), st["phase"]

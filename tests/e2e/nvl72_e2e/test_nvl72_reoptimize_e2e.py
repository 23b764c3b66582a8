"""A tray job split over two racks by a repair moves back into one at its checkpoint, on the real API
(issue 39). A TP8xDP8 job (16 trays, ``strategy: minimal``, a checkpoint interval) fills the non-spare trays
of one clique; three trays under three TP groups report an unhealthy GPU one after another: the clique's 2
warm spares replace the first two, the third TP group finds no spare and only it moves, whole, to the other
rack (its 2 tray pods re-created, the other 14 keep running), so the job holds a ComputeDomain in each clique.
Once the GPUs are healed the move into one clique is proposed and made at the job's next checkpoint; the
ComputeDomain of the clique it left goes."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from pjhelpers import Jobs, wait_for
from tests.timings import record_time

from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import GROUP, LAST_CHECKPOINT_ANNOTATION, PLURAL, VERSION
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status

pytestmark = pytest.mark.e2e


def _domains(kube: KubeSession, ns: str) -> set[str]:
    listed = kube.run(CustomObjectsApi(kube.api).list_namespaced_custom_object(cd.GROUP, cd.VERSION, ns, cd.PLURAL))
    return {
        d["metadata"]["annotations"][cd.CLIQUE_ANNOTATION]
        for d in listed.get("items", [])
        if not d["metadata"].get("deletionTimestamp")
    }


def _record(status: dict[str, Any]) -> PlacementRecord:
    record = record_from_status(status)
    assert record is not None and record.trays, status.get("placement")
    return record


def _bound_as_recorded(pjs: Jobs, record: PlacementRecord) -> bool:
    pods = {p.metadata.name: p.spec.node_name for p in pjs.live_pods("llm")}
    return len(pods) == len(record.trays) and all(pods.get(t.name) == t.node for t in record.trays)


def test_a_tray_job_split_by_a_repair_moves_back_into_one_clique_at_its_checkpoint(
    nvl72_kube: KubeSession, nvl72_pjs: Jobs
) -> None:
    kube, pjs, ns = nvl72_kube, nvl72_pjs, nvl72_pjs.namespace
    spec = {"checkpoint": {"intervalSeconds": 3600}, "failurePolicy": {"maxRestarts": 5}}
    pjs.create("llm", 8, 1, 8, gpuMemoryGiB=10, **spec)
    first = _record(pjs.wait_phase("llm", "Running", timeout_s=90))
    assert len(first.trays) == 16 and len({t.clique for t in first.trays}) == 1
    by_rank = sorted(first.trays, key=lambda t: t.node_rank)
    victims = [by_rank[0], by_rank[2], by_rank[4]]  # one tray under each of three TP groups
    try:
        for n, tray in enumerate(victims, start=1):
            kube.set_unhealthy_gpus(tray.node, [tray.gpu_indices[0]])
            status = pjs.wait_phase("llm", "Running", timeout_s=120, restarts=n)
            wait_for("the repair bound as recorded", lambda: _bound_as_recorded(pjs, _record(pjs.status("llm"))), 120)
        split = _record(status)
        assert len({t.clique for t in split.trays}) == 2, split.trays
        assert "only the broken TP groups moved (2 tray(s) from clique" in status["lastFailure"]["message"] or any(
            "only the broken TP groups moved" in c.get("message", "") for c in status.get("conditions") or []
        ), status
        kept = {(t.name, t.node) for t in first.trays} & {(t.name, t.node) for t in split.trays}
        assert len(kept) == 12, "the third repair re-created only the broken group's two tray pods"
        wait_for("a ComputeDomain in each clique", lambda: len(_domains(kube, ns)) == 2, 60)
    finally:
        for tray in victims:
            kube.set_unhealthy_gpus(tray.node, [])

    def proposed() -> dict[str, Any] | None:
        status = pjs.status("llm")
        return status if (status.get("reoptimization") or {}).get("proposedAt") else None

    status = wait_for("the move into one clique proposed", proposed, timeout_s=150)
    stamp = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {"metadata": {"annotations": {LAST_CHECKPOINT_ANNOTATION: stamp}}}  # it checkpoints after the proposal
    pjs.kube.run(
        pjs.custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "llm", patch, _content_type="application/merge-patch+json"
        )
    )
    started = dt.datetime.now(dt.UTC)

    def migrated() -> dict[str, Any] | None:
        status = pjs.status("llm")
        if not status.get("lastMigration") or status.get("phase") != "Running":
            return None
        return status if _bound_as_recorded(pjs, _record(status)) else None

    after = wait_for("the migration into one clique", migrated, timeout_s=180)
    record_time("tray job: checkpoint -> migrated and bound", (dt.datetime.now(dt.UTC) - started).total_seconds())
    moved = _record(after)
    (clique,) = {t.clique for t in moved.trays}
    assert after["lastMigration"]["costAfterMs"] < after["lastMigration"]["costBeforeMs"]
    assert after["restarts"] == 3, "a migration is not a failure"
    wait_for("only the ComputeDomain of the clique it runs in", lambda: _domains(kube, ns) == {clique}, 90)

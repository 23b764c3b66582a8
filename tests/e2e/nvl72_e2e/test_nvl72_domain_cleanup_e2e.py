"""A tray job re-placed onto the other rack loses its old ComputeDomain on the real API (issue 39): a
TP8xPP4xDP2 job with ``strategy: full`` fills the 16 non-spare trays of one clique; three of them report an
unhealthy GPU, more than the clique's 2 spares can replace, so the job is placed afresh on the other rack (under
``minimal`` only the broken TP groups would leave: test_nvl72_reoptimize_e2e.py); once its pods have left the
old clique the operator deletes that clique's ComputeDomain (and the garbage collector its claim template),
leaving exactly the ComputeDomain of the clique the job now uses."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from pjhelpers import Jobs, wait_for

from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status

pytestmark = pytest.mark.e2e


def _domains(kube: KubeSession, ns: str) -> dict[str, str]:
    """clique -> name of every ComputeDomain in ``ns`` not being deleted."""
    listed = kube.run(CustomObjectsApi(kube.api).list_namespaced_custom_object(cd.GROUP, cd.VERSION, ns, cd.PLURAL))
    return {
        d["metadata"]["annotations"][cd.CLIQUE_ANNOTATION]: d["metadata"]["name"]
        for d in listed.get("items", [])
        if not d["metadata"].get("deletionTimestamp")
    }


def test_a_job_re_placed_onto_the_other_rack_loses_its_old_compute_domain(
    nvl72_kube: KubeSession, nvl72_pjs: Jobs
) -> None:
    kube, pjs, ns = nvl72_kube, nvl72_pjs, nvl72_pjs.namespace
    pjs.create("llm", 8, 4, 2, gpuMemoryGiB=10, failurePolicy={"maxRestarts": 5, "strategy": "full"})
    record = record_from_status(pjs.wait_phase("llm", "Running", timeout_s=90))
    assert record is not None and len(record.trays) == 16
    (old,) = {t.clique for t in record.trays}
    wait_for("the job's ComputeDomain", lambda: _domains(kube, ns) == {old: cd.compute_domain_name("llm", old)}, 30)
    victims = record.trays[:3]
    for tray in victims:
        kube.set_unhealthy_gpus(tray.node, [tray.gpu_indices[0]])
    try:

        def moved() -> Any:
            status = pjs.status("llm")
            again = record_from_status(status)
            if status.get("phase") != "Running" or again is None or {t.clique for t in again.trays} & {old}:
                return None
            pods = {p.metadata.name: p.spec.node_name for p in pjs.live_pods("llm")}
            ok = all(pods.get(t.name) == t.node for t in again.trays) and len(pods) == len(again.trays)
            return again if ok else None

        after = wait_for("llm re-placed onto the other rack and bound", moved, 120, interval=0.1)
        (new,) = {t.clique for t in after.trays}
        wanted = {new: cd.compute_domain_name("llm", new)}
        wait_for("only the new clique's ComputeDomain left", lambda: _domains(kube, ns) == wanted, 60)
        for pod in pjs.live_pods("llm"):
            templates = [c.resource_claim_template_name for c in pod.spec.resource_claims or []]
            assert cd.claim_template_name(wanted[new]) in templates, templates
    finally:
        for tray in victims:
            kube.set_unhealthy_gpus(tray.node, [])

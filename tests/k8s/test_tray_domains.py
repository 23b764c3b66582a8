"""A tray job keeps exactly the ComputeDomains of the cliques its placement uses (plan/pods/computedomains.py):
one of a clique it left is deleted once none of its pods is there any more, a requeued job keeps none, and
no pass deletes a ComputeDomain whose claim template a pod of the job still references."""

from __future__ import annotations

import copy
from typing import Any

from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def _cluster(trays: int) -> FakeCluster:
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(2)
        for t in range(trays)
    ]
    return FakeCluster(nodes)


def _domain_cliques(fc: FakeCluster) -> dict[str, str]:
    return {
        name: body["metadata"]["annotations"][cd.CLIQUE_ANNOTATION] for (_, name), body in fc.compute_domains.items()
    }


def _record(fc: FakeCluster, key: str) -> Any:
    record = record_from_status(fc.job(key)["status"])
    assert record is not None, fc.job(key)["status"]
    return record


def _step_checking_claims(fc: FakeCluster, passes: int) -> None:
    """Pass ``passes`` times; after each, every pod of every job references a ComputeDomain that exists."""
    for _ in range(passes):
        fc.step()
        made = {cd.claim_template_name(name) for (_, name) in fc.compute_domains}
        for pod in fc.pods.values():
            for claim in pod["spec"].get("resourceClaims") or []:
                if claim["name"] == cd.CLAIM_NAME:
                    assert claim["resourceClaimTemplateName"] in made, (pod["metadata"]["name"], sorted(made))


def _down(fc: FakeCluster, name: str) -> None:
    fc.nodes[name]["status"]["conditions"][0]["status"] = "False"


def test_a_job_re_placed_onto_the_other_clique_keeps_only_that_cliques_compute_domain() -> None:
    fc = _cluster(trays=2)
    fc.add_job(paralleljob("llm", 8, 1, 1, memory=10.0))  # one TP8 group: both trays of one rack
    _step_checking_claims(fc, 2)
    assert fc.phase("ns/llm") == "Running"
    before = _record(fc, "ns/llm")
    (old,) = {t.clique for t in before.trays}
    assert set(_domain_cliques(fc).values()) == {old}
    _down(fc, before.trays[0].node)  # its rack has no free tray: the job leaves the clique
    _step_checking_claims(fc, 6)
    after = _record(fc, "ns/llm")
    (new,) = {t.clique for t in after.trays}
    assert new != old and fc.phase("ns/llm") == "Running"
    assert _domain_cliques(fc) == {cd.compute_domain_name("llm", new): new}
    assert any(reason == "ComputeDomainDeleted" and old in message for _, reason, message in fc.events), fc.events


def test_a_compute_domain_stays_while_a_pod_of_the_job_is_still_on_its_clique() -> None:
    fc = _cluster(trays=2)
    fc.add_job(paralleljob("llm", 8, 1, 1, memory=10.0))
    _step_checking_claims(fc, 2)
    before = _record(fc, "ns/llm")
    (old,) = {t.clique for t in before.trays}
    healthy = before.trays[1]
    terminating = copy.deepcopy(fc.pods[("ns", healthy.name)])
    terminating["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:05Z"
    _down(fc, before.trays[0].node)
    fc.step(hold={"ns/llm"})  # the re-placement's chain (status, then deleting the old pods) is still running
    fc.step()  # busy: its ComputeDomains are left alone
    assert cd.compute_domain_name("llm", old) in _domain_cliques(fc)
    fc.land("ns/llm")
    assert {t.clique for t in _record(fc, "ns/llm").trays} != {old}
    fc.pods[("ns", healthy.name)] = terminating  # the old pod has not finished terminating yet
    for _ in range(3):
        fc.step()
        assert cd.compute_domain_name("llm", old) in _domain_cliques(fc), fc.pods.keys()
    del fc.pods[("ns", healthy.name)]  # now it is gone
    _step_checking_claims(fc, 4)
    assert set(_domain_cliques(fc).values()) == {t.clique for t in _record(fc, "ns/llm").trays} != {old}


def test_a_requeued_tray_job_keeps_no_compute_domain() -> None:
    fc = _cluster(trays=2)
    fc.add_job(paralleljob("llm", 8, 1, 2, memory=10.0))  # two TP8 groups: both racks full
    _step_checking_claims(fc, 2)
    assert fc.phase("ns/llm") == "Running" and len(_domain_cliques(fc)) == 2
    _down(fc, _record(fc, "ns/llm").trays[0].node)
    _step_checking_claims(fc, 6)
    assert fc.phase("ns/llm") == "Queued", fc.job("ns/llm")["status"]
    assert not fc.job_pods("ns/llm") and _domain_cliques(fc) == {}

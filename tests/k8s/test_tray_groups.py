"""Pod groups on NVL72 trays (plan/groups/traygroups): a group whose pods each ask for a whole tray (fewer GPUs than
its TP) is placed by the NVLink placer on whole trays of one clique, never on an HGX node, gets that clique's
ComputeDomain with the channel template its pods name, and is refused with the reason when they name none."""

from __future__ import annotations

from typing import Any

from paralleljob.k8s.edge.constants import COMPLETION_INDEX_KEY
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status
from tests.k8s.factories import node
from tests.k8s.harness import FakeCluster
from tests.k8s.test_k8s_pod_groups import adopted, group_pod


def tray_pod(index: int, *, claim: bool = True) -> dict[str, Any]:
    pod = group_pod(index, gpus=4, shape="TP8xPP1xDP2")
    if claim:
        pod["spec"]["resourceClaims"] = [{"name": cd.CLAIM_NAME, "resourceClaimTemplateName": "llm-nvlink-channel"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": cd.CLAIM_NAME}]
    return pod


def cluster(pods: list[dict[str, Any]], racks: int = 2, trays: int = 6) -> FakeCluster:
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(racks)
        for t in range(trays)
    ]
    nodes += [node(f"hgx-{h}", 8, leaf="leaf-hgx") for h in range(4)]  # room for both TP8 groups
    fc = FakeCluster(nodes)
    for pod in pods:
        fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
    plan = fc.step()
    assert len(plan.adopt) == 1, plan.warnings
    fc.add_job(adopted(plan.adopt[0]))
    return fc


def test_a_group_of_whole_tray_pods_takes_trays_of_one_clique_with_its_compute_domain() -> None:
    fc = cluster([tray_pod(i) for i in range(4)])  # TP8 x DP2 over 4 pods of 4 GPUs
    plan = None
    for _ in range(4):
        plan = fc.step()
        if fc.job("ns/llm")["status"].get("phase") == "Running":
            break
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Running", status.get("message")
    record = record_from_status(status)
    assert record is not None and len(record.trays) == 4 and not record.slots
    assert len({t.clique for t in record.trays}) == 1, "one clique: the pods name one channel template"
    assert not any(t.node.startswith("hgx") for t in record.trays)
    by_rank = {t.node_rank: t for t in record.trays}
    for pod in fc.pods.values():
        tray = by_rank[int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])]
        assert pod["spec"]["nodeName"] == tray.node
    assert plan is not None
    domains = [d for a in plan.jobs for d in a.compute_domains] or [
        d for a in fc.step().jobs for d in a.compute_domains
    ]
    (clique,) = {t.clique for t in record.trays}
    names = {d["metadata"]["name"] for d in domains}
    assert names == {cd.compute_domain_name("llm", clique)}
    assert {d["spec"]["channel"]["resourceClaimTemplate"]["name"] for d in domains} == {"llm-nvlink-channel"}


def test_a_group_of_whole_tray_pods_without_the_channel_claim_is_refused_with_the_reason() -> None:
    fc = cluster([tray_pod(i, claim=False) for i in range(4)])
    for _ in range(3):
        fc.step()
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Queued" and not fc.binds
    ready = next(c for c in status["conditions"] if c["type"] == "PodGroupReady")
    assert ready["reason"] == "InvalidPodGroup"
    assert "resourceClaimTemplateName: llm-nvlink-channel" in ready["message"], ready["message"]


def test_a_tray_pod_of_a_group_that_finished_and_was_collected_is_done_and_its_tray_failing_moves_nothing() -> None:
    fc = cluster([tray_pod(i) for i in range(4)])
    for _ in range(4):
        fc.step()
    assert fc.phase("ns/llm") == "Running"
    record = record_from_status(fc.job("ns/llm")["status"])
    assert record is not None
    early = next(k for k, p in fc.pods.items() if p["metadata"]["annotations"][COMPLETION_INDEX_KEY] == "0")
    fc.pods[early]["status"]["phase"] = "Succeeded"
    fc.step()
    assert len(fc.job("ns/llm")["status"]["succeededPods"]) == 1
    tray = fc.pods.pop(early)["spec"]["nodeName"]  # the pod GC; then the tray it ran on fails
    fc.nodes[tray]["status"]["conditions"][0]["status"] = "False"
    fc.settle()
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Running" and status.get("restarts", 0) == 0, status
    assert record_from_status(status) == record, "nothing moved"
    for key in list(fc.pods):
        fc.pods[key]["status"]["phase"] = "Succeeded"
    fc.settle()
    assert (fc.phase("ns/llm"), fc.job("ns/llm")["status"]["message"]) == ("Succeeded", "all 4 workers succeeded")

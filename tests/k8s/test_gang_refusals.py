"""Every kind of gang works on a mixed cluster or is refused where the user sees why (issue 39, item 2; the
e2e matrix is ``tests/e2e/nvl72_e2e/test_gang_matrix_e2e.py``), decided on plain dicts:

- a Kubernetes PodGroup of whole-tray pods is a gang of one pod per tray, so its ``minCount`` is its tray count,
  not PP x DP; it is adopted and placed over trays of one clique;
- a PodGroup whose ``minCount`` is below its pods (kube-scheduler's elastic gang) is refused, and the reason is
  written on the PodGroup's scheduling condition, not only in the operator's log;
- an elastic job whose TP groups only NVL72 trays could hold is refused saying that elastic jobs take no trays,
  not that the cluster's largest node is too small.
"""

from __future__ import annotations

from typing import Any

from paralleljob.k8s.edge.parse.nativegroups import parse_pod_group
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.groups.podgroupstatus import refusal_conditions
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_k8s_pod_groups import adopted
from tests.k8s.test_native_pod_groups import native_pod, pod_group

CLIQUE = {cd.CLIQUE_LABEL: "uuid.0"}


def mixed() -> FakeCluster:
    """6 trays of 4 GPUs in one clique beside 2 HGX nodes of 8."""
    trays = [node(f"t{t}", 4, leaf="rack-0", product="NVIDIA-GB200", labels=CLIQUE) for t in range(6)]
    return FakeCluster([*trays, node("hgx-0", 8, leaf="leaf-h"), node("hgx-1", 8, leaf="leaf-h")])


def tray_pod(rank: int, group: str = "llm-workers") -> dict[str, Any]:
    pod = native_pod(rank, group=group, gpus=4)
    pod["spec"]["resourceClaims"] = [{"name": cd.CLAIM_NAME, "resourceClaimTemplateName": f"{group}-nvlink-channel"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": cd.CLAIM_NAME}]
    return pod


def with_pods(fc: FakeCluster, pods: list[dict[str, Any]]) -> FakeCluster:
    for pod in pods:
        fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
    return fc


def test_a_podgroup_of_whole_tray_pods_counts_one_pod_per_tray_and_is_placed_over_trays() -> None:
    fc = with_pods(mixed(), [tray_pod(0), tray_pod(1)])  # TP8 over 2 trays: a gang of 2 pods
    fc.pod_groups["ns/llm-workers"] = pod_group(min_count=2, shape="TP8xPP1xDP1")
    plan = fc.step()
    assert len(plan.adopt) == 1, plan.warnings  # before: "gang.minCount 2 is not PP x DP = 1"
    fc.add_job(adopted(plan.adopt[0]))
    for _ in range(4):
        fc.step()
    status = fc.job("ns/llm-workers")["status"]
    assert status["phase"] == "Running", status.get("message")
    record = record_from_status(status)
    assert record is not None and len(record.trays) == 2 and {t.clique for t in record.trays} == {"uuid.0"}


def test_a_podgroup_smaller_than_its_pods_is_refused_and_the_podgroup_says_why() -> None:
    for pods, shape, count in (
        ([native_pod(0, gpus=8), native_pod(1, gpus=8)], "8x1x2", "PP x DP = 2"),
        ([tray_pod(0), tray_pod(1)], "TP8xPP1xDP1", "TP x PP x DP / 4 = 2"),
    ):
        fc = with_pods(mixed(), pods)
        fc.pod_groups["ns/llm-workers"] = pod_group(min_count=1, shape=shape)
        plan = fc.step()
        assert not plan.adopt and not fc.binds
        why = plan.refused_groups["ns/llm-workers"]
        assert f"gang.minCount 1 is not {count}" in why and "an elastic gang" in why, why
        groups = {"ns/llm-workers": parse_pod_group(fc.pod_groups["ns/llm-workers"])}
        (condition,) = refusal_conditions(plan.refused_groups, groups)
        assert (condition.status, condition.reason) == ("False", "Unschedulable")
        assert condition.message.startswith("paralleljob-scheduler does not place this PodGroup: PodGroup llm-workers")
        said = condition.condition("2026-01-01T00:00:00Z")
        groups["ns/llm-workers"] = parse_pod_group(
            {**fc.pod_groups["ns/llm-workers"], "status": {"conditions": [said]}}
        )
        assert refusal_conditions(plan.refused_groups, groups) == [], "said once, not rewritten every pass"


def test_an_elastic_job_only_trays_could_hold_is_refused_saying_elastic_jobs_take_no_trays() -> None:
    fc = mixed()
    body = paralleljob("wide", 16, 1, 2)
    body["spec"]["parallelism"].update(minData=1, maxData=2)
    fc.add_job(body)
    fc.step()
    status = fc.job("ns/wide")["status"]
    assert status["phase"] == "Failed"
    assert "the largest node has 8" in status["message"]
    assert "an elastic job is not placed over NVL72 trays" in status["message"], status["message"]
    rigid = mixed()
    rigid.add_job(paralleljob("wide", 16, 1, 1))
    for _ in range(3):
        rigid.step()
    assert rigid.job("ns/wide")["status"]["phase"] == "Running"  # the same TP16, rigid, takes 4 trays

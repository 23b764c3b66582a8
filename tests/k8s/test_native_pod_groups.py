"""Kubernetes' own gang API, decided on plain dicts: pods that name a scheduling.k8s.io PodGroup and ask for
our scheduler form a group; the PodGroup (or its Workload) declares the shape; a topology key keeps the whole
gang inside one domain of that node label; the PodGroup's status says what kube-scheduler's would."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from paralleljob.k8s.edge.constants import GPU_RESOURCE, NODE_RANK_ANNOTATION, PARALLELISM_ANNOTATION, SCHEDULER_NAME
from paralleljob.k8s.edge.parse.nativegroups import parse_pod_group, parse_workload, workload_reference
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.groups.podgroups import GroupDeclarationError, adopting_manifest
from paralleljob.k8s.plan.groups.podgroupstatus import pod_group_conditions
from tests.k8s.factories import node
from tests.k8s.harness import FakeCluster
from tests.k8s.test_k8s_pod_groups import adopted

_uid = itertools.count(1)
LEAF = "network.topology.nvidia.com/leaf"


def native_pod(
    rank: int, *, group: str = "llm-workers", gpus: int = 4, scheduler: str = SCHEDULER_NAME
) -> dict[str, Any]:
    """A bare pod of a PodGroup: no label of ours, its node rank by annotation."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"w-{rank}",
            "namespace": "ns",
            "uid": f"uid-pod-{next(_uid)}",
            "resourceVersion": str(next(_uid)),
            "annotations": {NODE_RANK_ANNOTATION: str(rank)},
        },
        "spec": {
            "schedulerName": scheduler,
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
        },
        "status": {"phase": "Pending"},
    }


def pod_group(
    name: str = "llm-workers",
    *,
    min_count: int = 4,
    shape: str | None = "4x2x2",
    topology_key: str | None = None,
    workload: str | None = None,
    version: str = "v1beta1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if workload:
        spec.update(workload_reference(version, workload, "workers"))
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-pg-{name}", "generation": 1}
    if shape:
        metadata["annotations"] = {PARALLELISM_ANNOTATION: shape}
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup", "metadata": metadata, "spec": spec}


def cluster(nodes: int = 4, per_leaf: int = 2) -> FakeCluster:
    return FakeCluster([node(f"n{i}", leaf=f"leaf-{i // per_leaf}") for i in range(nodes)])


def add(fc: FakeCluster, *pods: dict[str, Any]) -> None:
    for pod in pods:
        fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod


def adopt(fc: FakeCluster) -> dict[str, Any]:
    plan = fc.step()
    assert len(plan.adopt) == 1, plan.warnings
    fc.add_job(adopted(plan.adopt[0]))
    return plan.adopt[0]


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


# ---- parsing ------------------------------------------------------------------------------------------
def test_a_pod_joins_the_podgroup_it_names_only_when_it_asks_for_our_scheduler() -> None:
    ours = parse_pod(native_pod(1))
    assert (ours.group, ours.native, ours.group_rank, ours.first_container_gpus) == ("llm-workers", True, 1, 4)
    theirs = parse_pod(native_pod(1, scheduler="default-scheduler"))
    assert theirs.group is None and not theirs.native
    labelled = native_pod(0)
    labelled["metadata"]["labels"] = {"paralleljob.dev/pod-group": "mine"}
    assert (parse_pod(labelled).group, parse_pod(labelled).native) == ("mine", False)  # our label wins


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha2"])
def test_a_podgroup_is_read_as_kube_scheduler_reads_it(version: str) -> None:
    body = pod_group(topology_key=LEAF, workload="llm", version=version)
    assert ("workloadRef" in body["spec"]) == (version == "v1beta1")  # 1.37 renamed the Workload reference
    group = parse_pod_group(body)
    assert (group.min_count, group.topology_key, group.workload) == (4, LEAF, "llm")
    basic = pod_group()
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    assert parse_pod_group(basic).min_count is None


# ---- the adopting ParallelJob -------------------------------------------------------------------------
def test_the_shape_comes_from_the_podgroup_then_its_workload_then_the_pods_then_the_gang_size() -> None:
    pods = [parse_pod(native_pod(r)) for r in range(4)]
    workload = {
        "metadata": {"name": "llm", "namespace": "ns", "annotations": {PARALLELISM_ANNOTATION: "4x4x1"}},
    }
    workloads = {"ns/llm": parse_workload(workload)}
    own = parse_pod_group(pod_group(workload="llm"))
    assert adopting_manifest("ns", "llm-workers", pods, own, workloads)["spec"]["parallelism"] == {
        "tensor": 4, "pipeline": 2, "data": 2,
    }  # fmt: skip
    from_workload = parse_pod_group(pod_group(shape=None, workload="llm"))
    manifest = adopting_manifest("ns", "llm-workers", pods, from_workload, workloads)
    assert manifest["spec"]["parallelism"] == {"tensor": 4, "pipeline": 4, "data": 1}
    bare = parse_pod_group(pod_group(shape=None))
    manifest = adopting_manifest("ns", "llm-workers", pods, bare, {})
    assert manifest["spec"]["parallelism"] == {"tensor": 4, "pipeline": 1, "data": 4}  # TP = the pod's GPUs
    assert manifest["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "name": "llm-workers",
            "uid": "uid-pg-llm-workers",
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]


def test_a_group_is_not_adopted_without_its_podgroup_or_with_a_gang_size_that_is_not_pp_times_dp() -> None:
    pods = [parse_pod(native_pod(r)) for r in range(4)]
    with pytest.raises(GroupDeclarationError, match="does not exist"):
        adopting_manifest("ns", "llm-workers", pods, None, {})
    with pytest.raises(GroupDeclarationError, match="minCount 3 is not PP x DP = 4"):
        adopting_manifest("ns", "llm-workers", pods, parse_pod_group(pod_group(min_count=3)), {})
    fc = cluster()
    add(fc, *(native_pod(r) for r in range(4)))
    plan = fc.step()
    assert not plan.adopt and any("PodGroup llm-workers, which does not exist" in w for w in plan.warnings)


# ---- placement and status ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "condition_type"), [("v1beta1", "PodGroupInitiallyScheduled"), ("v1alpha2", "PodGroupScheduled")]
)
def test_a_podgroup_is_held_until_complete_then_bound_whole_and_its_status_says_so(
    version: str, condition_type: str
) -> None:
    fc = cluster()
    fc.pod_groups["ns/llm-workers"] = pod_group(version=version)
    add(fc, *(native_pod(r) for r in range(3)))
    adopt(fc)
    fc.step()
    job = fc.job("ns/llm-workers")
    assert job["status"]["phase"] == "Queued" and not fc.binds
    [waiting] = pod_group_conditions(
        [parse_job(job)], {"ns/llm-workers": parse_pod_group(fc.pod_groups["ns/llm-workers"])}
    )
    assert (waiting.status, waiting.reason) == ("False", "Unschedulable")
    assert "3 of 4 pods exist (missing node ranks 3)" in waiting.message
    add(fc, native_pod(3))
    for _ in range(3):
        fc.step()
    job = fc.job("ns/llm-workers")
    assert job["status"]["phase"] == "Running" and len(fc.binds) == 4
    assert job["status"]["communicationCost"]["totalMs"] == pytest.approx(233.71, abs=0.01)  # the seed optimum
    group = fc.pod_groups["ns/llm-workers"]
    [scheduled] = pod_group_conditions([parse_job(job)], {"ns/llm-workers": parse_pod_group(group)})
    assert (scheduled.status, scheduled.reason) == ("True", "Scheduled")
    assert "all 4 pods placed as one gang" in scheduled.message and "233.7 ms" in scheduled.message
    assert scheduled.condition("2024-01-01T00:00:00Z")["observedGeneration"] == 1
    assert scheduled.condition("2024-01-01T00:00:00Z")["type"] == condition_type  # as that version's scheduler
    # written once: a PodGroup that says so already is left alone, and True is never turned back to False
    group["status"] = {"conditions": [scheduled.condition("2024-01-01T00:00:00Z")]}
    assert pod_group_conditions([parse_job(job)], {"ns/llm-workers": parse_pod_group(group)}) == []
    queued = parse_job({**job, "status": {**job["status"], "phase": "Queued"}})
    assert pod_group_conditions([queued], {"ns/llm-workers": parse_pod_group(group)}) == []


def test_a_topology_key_keeps_the_gang_in_one_domain_and_one_too_small_everywhere_leaves_it_waiting() -> None:
    # four nodes, two per leaf, and a label that cuts across the leaves (n0, n2 | n1, n3): the cheapest
    # placement of TP4 x PP2 x DP2 is inside a leaf, yet the key asks for one domain of the other label
    rack = "example.com/rack"
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 2}", labels={rack: f"r{i % 2}"}) for i in range(4)])
    fc.pod_groups["ns/llm-workers"] = pod_group(topology_key=rack)
    add(fc, *(native_pod(r) for r in range(4)))
    adopt(fc)
    for _ in range(3):
        fc.step()
    nodes = {name for _, name in fc.binds}
    assert len(fc.binds) == 4 and nodes in ({"n0", "n2"}, {"n1", "n3"}), fc.binds
    # TP4 x PP2 x DP4 (32 GPUs) needs two leaves: with the leaf as topology key it waits, saying why
    wide = cluster()
    wide.pod_groups["ns/wide"] = pod_group("wide", min_count=8, shape="4x2x4", topology_key=LEAF)
    add(wide, *(native_pod(r, group="wide") for r in range(8)))
    adopt(wide)
    for _ in range(3):
        wide.step()
    job = wide.job("ns/wide")
    assert job["status"]["phase"] == "Queued" and not wide.binds
    placed = condition(job["status"], "Placed")
    assert placed["status"] == "False"
    assert f"no single domain of topology key {LEAF} has room for 8 TP groups of 4 GPUs" in placed["message"]
    # the same group without the key is placed across both leaves
    free = cluster()
    free.pod_groups["ns/wide"] = pod_group("wide", min_count=8, shape="4x2x4")
    add(free, *(native_pod(r, group="wide") for r in range(8)))
    adopt(free)
    for _ in range(3):
        free.step()
    assert len(free.binds) == 8


def test_a_repair_keeps_the_gang_inside_the_domain_of_its_topology_key() -> None:
    """Six nodes, three per leaf, and a label that is not a level of the topology: pool a = n0, n1, n3 and
    pool b = n2, n4, n5. Placed in one pool, a node of the gang goes down: the cheapest healthy node (beside
    the surviving TP groups, in their leaf) is in the other pool, so a repair that did not read the key would
    move the slot there; it must go to the free node of the same pool instead."""
    pool = "example.com/pool"
    pools = {"n0": "a", "n1": "a", "n2": "b", "n3": "a", "n4": "b", "n5": "b"}
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 3}", labels={pool: pools[f"n{i}"]}) for i in range(6)])
    fc.pod_groups["ns/llm-workers"] = pod_group(topology_key=pool)
    add(fc, *(native_pod(r) for r in range(4)))
    adopt(fc)
    for _ in range(3):
        fc.step()
    placed = {name for _, name in fc.binds}
    (domain,) = {pools[n] for n in placed}
    assert len(placed) == 2 and len({int(n[1:]) // 3 for n in placed}) == 1, "one leaf of one pool"
    victim = sorted(placed)[0]
    fc.nodes[victim] = node(victim, leaf=f"leaf-{int(victim[1:]) // 3}", ready=False, labels={pool: domain})
    for _ in range(2):
        fc.step()
    status = fc.job("ns/llm-workers")["status"]
    assert status["phase"] == "Recovering", status.get("message")
    now_on = {p["node"] for p in status["placement"]["pods"]}
    assert victim not in now_on and {pools[n] for n in now_on} == {domain}, now_on
    (spare,) = {n for n, p in pools.items() if p == domain} - placed
    assert now_on == (placed - {victim}) | {spare}


def _claim(name: str, allocated_on: str | None, consumers: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A claim whose allocation is usable from the nodes of one leaf (as a multi-node device's is, by label)."""
    status: dict[str, Any] = {}
    if allocated_on is not None:
        status["allocation"] = {
            "devices": {"results": [{"driver": "imex.nvidia.com", "pool": "domain-0", "device": "channel-0"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": LEAF, "operator": "In", "values": [allocated_on]}]}]
            },
        }
    if consumers:
        status["reservedFor"] = consumers
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-claim-{name}", "resourceVersion": "7"},
        "spec": {"devices": {"requests": []}},
        "status": status,
    }


def test_a_podgroups_shared_claim_is_waited_for_then_placed_where_its_allocation_reaches_and_reserved() -> None:
    """PodGroup.spec.resourceClaims (one claim the gang shares): the group waits while the claim is missing or
    not allocated, saying so; then it is placed only on nodes the allocation's node selector admits (here the
    second leaf, where the first would otherwise be taken) and the claim is reserved for the PodGroup, keeping
    the consumer it had, before any pod is bound."""
    fc = cluster()
    group = pod_group()
    group["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": "imex-channel"}]
    fc.pod_groups["ns/llm-workers"] = group
    add(fc, *(native_pod(r) for r in range(4)))
    adopt(fc)
    fc.step()
    ready = condition(fc.job("ns/llm-workers")["status"], "PodGroupReady")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForClaim") and not fc.binds
    assert "ResourceClaim ns/imex-channel is not there" in ready["message"]
    fc.resource_claims["ns/imex-channel"] = _claim("imex-channel", None)
    fc.step()
    ready = condition(fc.job("ns/llm-workers")["status"], "PodGroupReady")
    assert ready["reason"] == "WaitingForClaim" and "is not allocated" in ready["message"] and not fc.binds
    other = {"apiGroup": "", "resource": "pods", "name": "monitor", "uid": "uid-monitor"}
    fc.resource_claims["ns/imex-channel"] = _claim("imex-channel", "leaf-1", [other])
    for _ in range(3):
        fc.step()
    job = fc.job("ns/llm-workers")
    assert job["status"]["phase"] == "Running" and {n for _, n in fc.binds} == {"n2", "n3"}, fc.binds
    reserved = fc.resource_claims["ns/imex-channel"]["status"]["reservedFor"]
    assert reserved == [
        other,
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "llm-workers", "uid": "uid-pg-llm-workers"},
    ]
    assert [e for e in fc.events if e[1] == "WaitingForClaim"] != []


def test_a_claim_made_from_a_template_is_found_through_the_podgroups_status() -> None:
    group = pod_group()
    group["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimTemplateName": "imex"}]
    (entry,) = parse_pod_group(group).resource_claims
    assert (entry.name, entry.claim, entry.template) == ("channel", "", "imex")
    group["status"] = {"resourceClaimStatuses": [{"name": "channel", "resourceClaimName": "llm-workers-channel-x7"}]}
    (entry,) = parse_pod_group(group).resource_claims
    assert entry.claim == "llm-workers-channel-x7"
    fc = cluster()
    fc.pod_groups["ns/llm-workers"] = pod_group()
    fc.pod_groups["ns/llm-workers"]["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimTemplateName": "t"}]
    add(fc, *(native_pod(r) for r in range(4)))
    adopt(fc)
    fc.step()
    ready = condition(fc.job("ns/llm-workers")["status"], "PodGroupReady")
    assert ready["reason"] == "WaitingForClaim" and "from template 't' has not been made yet" in ready["message"]


def test_the_gang_api_version_watched_is_the_newest_the_server_serves() -> None:
    from paralleljob.k8s.edge.parse.nativegroups import served_version

    def group(*versions: str) -> dict[str, Any]:
        listed = [{"groupVersion": f"scheduling.k8s.io/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "name": "scheduling.k8s.io", "versions": listed}

    assert served_version(group("v1", "v1alpha2")) == "v1alpha2"  # 1.36 with the gang API on
    assert served_version(group("v1", "v1beta1")) == "v1beta1"  # 1.37
    assert served_version(group("v1", "v1beta1", "v1alpha2")) == "v1beta1"
    assert served_version(group("v1")) == "v1beta1"  # none served: the default, whose optional watch finds none


def test_a_job_controllers_long_podgroup_name_is_the_adopting_jobs_name_without_a_label_that_cannot_hold_it() -> None:
    long = "llama-70b-pretrain-stage-2-7c9f957f67-llama-70b-pretrain-stage-2-pgt-0-6988f765b8"  # as the e2e got it
    fc = cluster()
    fc.pod_groups[f"ns/{long}"] = pod_group(long)
    add(fc, *(native_pod(r, group=long) for r in range(4)))
    manifest = adopt(fc)
    assert manifest["metadata"]["name"] == long and len(long) > 63
    assert "paralleljob.dev/pod-group" not in manifest["metadata"]["labels"]  # a label value holds 63
    short = cluster()
    short.pod_groups["ns/llm-workers"] = pod_group()
    add(short, *(native_pod(r) for r in range(4)))
    assert adopt(short)["metadata"]["labels"]["paralleljob.dev/pod-group"] == "llm-workers"
    for _ in range(3):
        fc.step()
    assert fc.job(f"ns/{long}")["status"]["phase"] == "Running" and len(fc.binds) == 4


def test_a_basic_podgroup_is_not_placed_and_the_warning_says_how_a_job_asks_for_a_gang() -> None:
    # Kubernetes 1.37's Job controller makes a basic PodGroup unless the Job sets spec.scheduling
    fc = cluster()
    basic = pod_group()
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    fc.pod_groups["ns/llm-workers"] = basic
    add(fc, *(native_pod(r) for r in range(4)))
    plan = fc.step()
    assert not plan.adopt and not fc.binds
    assert any("no gang policy" in w and "spec.scheduling.schedulingPolicy.gang.minCount" in w for w in plan.warnings)

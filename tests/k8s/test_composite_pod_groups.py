"""CompositePodGroups (Kubernetes 1.38 beta), decided on plain dicts: a root whose child PodGroups are the
ReplicatedJobs of a gang-of-gangs JobSet is placed as ONE gang, each child on its own contiguous range of node
ranks in the order of its template in the Workload; the root and every child say what kube-scheduler 1.38 says
after its one cycle for the tree. And the gang API read as ``scheduling.k8s.io/v1`` when a release serves it."""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.k8s.edge.parse.compositegroups import parse_composite_group
from paralleljob.k8s.edge.parse.nativegroups import (
    parse_pod_group,
    parse_workload,
    scheduled_condition,
    served_version,
    workload_reference,
)
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.groups.composites import fold_composites
from paralleljob.k8s.plan.groups.podgroups import GroupDeclarationError, adopting_manifest
from paralleljob.k8s.plan.groups.podgroupstatus import pod_group_conditions, refusal_conditions
from tests.k8s.harness import FakeCluster
from tests.k8s.test_native_pod_groups import LEAF, add, adopt, cluster, condition, native_pod, pod_group

CHILDREN = ("leader", "followers")  # template order; "followers" sorts first by name


def workload(name: str = "train", children: tuple[str, ...] = CHILDREN) -> dict[str, Any]:
    templates = [{"name": c, "schedulingPolicy": {"gang": {"minCount": 2}}} for c in children]
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"compositePodGroupTemplates": [{"name": "whole", "podGroupTemplates": templates}]},
    }


def composite(
    name: str = "train", *, groups: int | None = 2, shape: str | None = "4x2x2", key: str | None = None
) -> dict[str, Any]:
    policy = {"gang": {"minGroupCount": groups}} if groups is not None else {"basic": {}}
    spec: dict[str, Any] = {"workloadRef": {"workloadName": name, "templateName": "whole"}, "schedulingPolicy": policy}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-cpg-{name}", "generation": 1}
    if shape:
        metadata["annotations"] = {"paralleljob.dev/parallelism": shape}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup", "metadata": metadata, "spec": spec}


def child(template: str, root: str = "train", min_count: int = 2) -> dict[str, Any]:
    body = pod_group(f"{root}-{template}", min_count=min_count, shape=None)
    body["spec"].update(parentCompositePodGroupName=root, workloadRef={"workloadName": root, "templateName": template})
    return body


def gang_of_gangs(fc: FakeCluster, root: dict[str, Any] | None = None) -> None:
    fc.workloads["ns/train"] = workload()
    fc.composite_groups["ns/train"] = root or composite()
    for template in reversed(CHILDREN):  # created out of order: the order is the Workload's
        fc.pod_groups[f"ns/train-{template}"] = child(template)


def member(rank: int) -> dict[str, Any]:
    """Pod of node rank ``rank`` of the whole gang: ranks 0-1 are the leader's, 2-3 the followers'."""
    pod = native_pod(rank, group=f"train-{CHILDREN[rank // 2]}")
    pod["metadata"]["name"] = f"train-{CHILDREN[rank // 2]}-{rank}"
    return pod


def folded(fc: FakeCluster) -> tuple[list[Any], dict[str, Any]]:
    pods, groups = fold_composites(
        [parse_pod(p) for p in fc.pods.values()],
        [parse_pod_group(b) for b in fc.pod_groups.values()],
        [parse_composite_group(b) for b in fc.composite_groups.values()],
        {k: parse_workload(b) for k, b in fc.workloads.items()},
    )
    return list(pods), groups


# ---- folding ---------------------------------------------------------------------------------------------
def test_the_children_become_one_gang_of_the_roots_name_in_the_workloads_template_order() -> None:
    fc = cluster()
    gang_of_gangs(fc)
    add(fc, *(member(r) for r in range(4)))
    pods, groups = folded(fc)
    assert set(groups) == {"ns/train"}  # the children are folded into the root
    whole = groups["ns/train"]
    assert (whole.kind, whole.min_count, whole.problem) == ("CompositePodGroup", 4, "")
    assert [(m.group.name, m.first_rank) for m in whole.members] == [("train-leader", 0), ("train-followers", 2)]
    assert {(p.name, p.group, p.group_rank) for p in pods} == {
        ("train-leader-0", "train", 0), ("train-leader-1", "train", 1),
        ("train-followers-2", "train", 2), ("train-followers-3", "train", 3),
    }  # fmt: skip
    manifest = adopting_manifest("ns", "train", [p for p in pods if p.group == "train"], whole, {})
    assert manifest["spec"]["parallelism"] == {"tensor": 4, "pipeline": 2, "data": 2}
    owner = manifest["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("CompositePodGroup", "train", "uid-cpg-train")


def test_without_a_shape_annotation_the_gang_is_tp_the_pods_gpus_by_the_sum_of_the_childrens_min_counts() -> None:
    fc = cluster()
    gang_of_gangs(fc, composite(shape=None))
    add(fc, *(member(r) for r in range(4)))
    pods, groups = folded(fc)
    manifest = adopting_manifest("ns", "train", pods, groups["ns/train"], {})
    assert manifest["spec"]["parallelism"] == {"tensor": 4, "pipeline": 1, "data": 4}


@pytest.mark.parametrize(
    ("root", "children", "why"),
    [
        (composite(groups=None), CHILDREN, "has a basic policy: its child groups are scheduled one by one"),
        (composite(groups=3), CHILDREN, "2 of its 3 child PodGroups exist"),
        (composite(groups=1), CHILDREN, "minGroupCount 1 is not its number of child PodGroups (2)"),
        (composite(), ("leader",), "1 of its 2 child PodGroups exist"),
    ],
)
def test_a_composite_that_is_not_one_whole_gang_is_not_adopted_and_says_why(
    root: dict[str, Any], children: tuple[str, ...], why: str
) -> None:
    fc = cluster()
    gang_of_gangs(fc, root)
    for gone in set(CHILDREN) - set(children):
        del fc.pod_groups[f"ns/train-{gone}"]
    add(fc, *(member(r) for r in range(4) if CHILDREN[r // 2] in children))
    plan = fc.step()
    assert not plan.adopt and not fc.binds
    assert any(why in w for w in plan.warnings), plan.warnings
    _, groups = folded(fc)
    (refusal,) = refusal_conditions(plan.refused_groups, groups)  # said where kubectl shows it: on the composite
    assert (refusal.name, refusal.condition_type) == ("train", "CompositePodGroupInitiallyScheduled")
    assert refusal.status == "False" and why in refusal.message


def test_a_child_with_a_basic_policy_or_of_a_missing_composite_is_not_placed_on_its_own() -> None:
    fc = cluster()
    gang_of_gangs(fc)
    fc.pod_groups["ns/train-followers"]["spec"]["schedulingPolicy"] = {"basic": {}}
    add(fc, *(member(r) for r in range(4)))
    plan = fc.step()
    assert not plan.adopt and any("child PodGroup train-followers has a basic policy" in w for w in plan.warnings)
    orphan = cluster()
    orphan.pod_groups["ns/train-leader"] = child("leader")  # its CompositePodGroup is not there (yet)
    add(orphan, member(0), member(1))
    plan = orphan.step()
    assert not plan.adopt
    assert any("belongs to CompositePodGroup train, which is not a root that exists" in w for w in plan.warnings)


def test_a_pod_whose_rank_is_outside_its_childs_range_is_not_placed_and_the_group_says_why() -> None:
    fc = cluster()
    gang_of_gangs(fc)
    pods = [member(0), member(1), member(2), member(3)]
    pods[1]["metadata"]["annotations"]["paralleljob.dev/node-rank"] = "2"  # a leader's pod on a follower's rank
    pods[2]["metadata"]["annotations"]["paralleljob.dev/node-rank"] = "1"
    add(fc, *pods)
    adopt(fc)
    fc.settle(3)
    ready = condition(fc.job("ns/train")["status"], "PodGroupReady")
    assert ready["reason"] == "InvalidPodGroup" and not fc.binds
    assert (
        "node rank 2 is outside 0..1, the ranks of its PodGroup train-leader in CompositePodGroup train"
        in (ready["message"])
    )


# ---- placement and status --------------------------------------------------------------------------------
def test_a_composite_is_held_until_complete_then_bound_whole_with_each_childs_ranks_in_order() -> None:
    fc = cluster()
    gang_of_gangs(fc, composite(key=LEAF))
    add(fc, *(member(r) for r in range(3)))
    adopt(fc)
    fc.step()
    job = fc.job("ns/train")
    assert job["status"]["phase"] == "Queued" and not fc.binds
    _, groups = folded(fc)
    waiting = {c.name: c for c in pod_group_conditions([parse_job(job)], groups)}
    assert waiting["train"].condition_type == "CompositePodGroupInitiallyScheduled"
    assert (waiting["train"].status, waiting["train"].reason) == ("False", "Unschedulable")
    assert "3 of 4 pods exist (missing node ranks 3)" in waiting["train"].message
    assert "node ranks 2..3 of 4" in waiting["train-followers"].message
    assert waiting["train-followers"].condition_type == "PodGroupInitiallyScheduled"

    add(fc, member(3))
    fc.settle(3)
    job = fc.job("ns/train")
    assert job["status"]["phase"] == "Running" and len(fc.binds) == 4
    assert job["status"]["communicationCost"]["totalMs"] == pytest.approx(233.71, abs=0.01)  # a twin's optimum
    leaves = {fc.nodes[node]["metadata"]["labels"][LEAF] for _, node in fc.binds}
    assert len(leaves) == 1  # the root's topology key: the whole gang in one domain
    record = record_from_status(job["status"])
    assert record is not None
    bound = dict(fc.binds)
    for slot in record.pod_slots:  # the slot of each node rank holds that rank's pod: the leader's are 0 and 1
        rank = record.node_rank(slot)
        assert bound[f"train-{CHILDREN[rank // 2]}-{rank}"] == slot.node

    _, groups = folded(fc)
    done = {c.name: c for c in pod_group_conditions([parse_job(job)], groups)}
    assert set(done) == {"train", "train-leader", "train-followers"}
    assert all((c.status, c.reason) == ("True", "Scheduled") for c in done.values())
    assert "all 4 pods placed as one gang" in done["train"].message
    assert done["train-leader"].message.endswith("its node ranks 0..1")
    assert done["train"].condition("t")["observedGeneration"] == 1
    # written once, never turned back: each object that says so already is left alone
    fc.composite_groups["ns/train"]["status"] = {"conditions": [done["train"].condition("t")]}
    for name in ("train-leader", "train-followers"):
        fc.pod_groups[f"ns/{name}"]["status"] = {"conditions": [done[name].condition("t")]}
    _, groups = folded(fc)
    assert pod_group_conditions([parse_job(job)], groups) == []
    queued = parse_job({**job, "status": {**job["status"], "phase": "Queued"}})
    assert pod_group_conditions([queued], groups) == []


# ---- scheduling.k8s.io/v1 (served by no release yet: 1.38.0-beta.0 keeps the gang API at v1beta1) ------------
def test_a_v1_podgroup_is_read_and_written_as_v1beta1s_and_v1_is_watched_only_where_it_lists_podgroups() -> None:
    body = pod_group(topology_key=LEAF, workload="llm", version="v1")
    assert body["spec"]["workloadRef"] == {"workloadName": "llm", "templateName": "workers"}
    group = parse_pod_group(body)
    assert (group.api_version, group.min_count, group.topology_key, group.workload, group.template) == (
        "scheduling.k8s.io/v1", 4, LEAF, "llm", "workers",
    )  # fmt: skip
    assert group.scheduled_condition == scheduled_condition("v1") == "PodGroupInitiallyScheduled"
    assert workload_reference("v1", "llm", "workers") == workload_reference("v1beta1", "llm", "workers")
    discovery = {"versions": [{"version": v} for v in ("v1", "v1beta1")]}
    assert served_version(discovery) == "v1beta1"  # v1 without its resource list: PriorityClasses only
    priority_classes = {"resources": [{"name": "priorityclasses"}]}
    assert served_version(discovery, priority_classes) == "v1beta1"  # 1.38.0-beta.0's v1
    gang_v1 = {"resources": [{"name": "priorityclasses"}, {"name": "podgroups"}, {"name": "workloads"}]}
    assert served_version(discovery, gang_v1) == "v1"


def test_a_v1_podgroup_is_placed_and_says_so_under_its_own_version() -> None:
    fc = cluster()
    fc.pod_groups["ns/llm-workers"] = pod_group(version="v1")
    add(fc, *(native_pod(r) for r in range(4)))
    manifest = adopt(fc)
    assert manifest["metadata"]["ownerReferences"][0]["apiVersion"] == "scheduling.k8s.io/v1"
    fc.settle(3)
    job = fc.job("ns/llm-workers")
    assert job["status"]["phase"] == "Running" and len(fc.binds) == 4
    group = parse_pod_group(fc.pod_groups["ns/llm-workers"])
    [said] = pod_group_conditions([parse_job(job)], {"ns/llm-workers": group})
    assert (said.api_version, said.condition_type, said.status) == (
        "scheduling.k8s.io/v1", "PodGroupInitiallyScheduled", "True",
    )  # fmt: skip


def test_without_composites_the_pods_and_podgroups_pass_through_untouched() -> None:
    pods = [parse_pod(native_pod(r)) for r in range(4)]
    same, groups = fold_composites(pods, [parse_pod_group(pod_group())], [], {})
    assert same is pods and list(groups) == ["ns/llm-workers"]  # nothing to fold: the pods as given
    with pytest.raises(GroupDeclarationError, match="minCount 3 is not PP x DP = 4"):
        adopting_manifest("ns", "llm-workers", pods, parse_pod_group(pod_group(min_count=3)), {})

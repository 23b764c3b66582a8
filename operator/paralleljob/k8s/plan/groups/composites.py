"""Composite pod groups as one gang: a CompositePodGroup root whose children are PodGroups (one per ReplicatedJob
of a JobSet that asks for a gang of gangs) is placed as ONE gang, each child holding a contiguous range of
node ranks, in the order of its template in the Workload (docs/pod-groups.md "Composite pod groups").

Pure: :func:`fold_composites` takes the parsed pods, PodGroups, CompositePodGroups and Workloads and returns
them as the rest of the planner already knows them. The children's pods become pods of one group named after
the root, and the root becomes one :class:`NativeGroup` whose ``minCount`` is the sum of its children's, with
its children (and where each one's ranks start) in ``members``, so that the status written back reaches the
root and every child as kube-scheduler's would. A pod's node rank is its rank in the whole gang (what torchrun's
``--node-rank`` gets; JobSet's global job index gives exactly that), and must fall in its own child's range.

What is not placed as one gang (the log and the adopting ParallelJob's absence say why, as for a PodGroup with
a basic policy): a composite with a basic policy, whose children kube-scheduler would place one by one; one
whose ``minGroupCount`` is not its number of children (a gang of *some* of its groups); a child with a basic
policy; a composite under another composite (depth above one level); and, while it waits for them, a root
with fewer children than ``minGroupCount``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.compositegroups import KIND, CompositeGroup
from paralleljob.k8s.edge.parse.nativegroups import Member, NativeGroup, WorkloadInfo
from paralleljob.k8s.edge.parse.pods import PodInfo


def _children_in_order(
    root: CompositeGroup, groups: Iterable[NativeGroup], workloads: Mapping[str, WorkloadInfo]
) -> list[NativeGroup]:
    """The root's child PodGroups, in the order of their templates under the root's template (then by name)."""
    children = [g for g in groups if g.parent == root.name and g.namespace == root.namespace]
    workload = workloads.get(object_key(root.namespace, root.workload))
    order = dict(workload.composite_templates).get(root.template, ()) if workload is not None else ()
    position = {template: i for i, template in enumerate(order)}
    return sorted(children, key=lambda g: (position.get(g.template, len(order)), g.name))


def _problem(root: CompositeGroup, children: list[NativeGroup], nested: bool) -> str:
    what = f"CompositePodGroup {root.name}"
    if root.min_group_count is None:
        return f"{what} has a basic policy: its child groups are scheduled one by one, not as one gang"
    if nested:
        return f"{what} has composite children: only one level (a composite of PodGroups) is placed as one gang"
    if len(children) < root.min_group_count:
        return f"{what}: {len(children)} of its {root.min_group_count} child PodGroups exist"
    if len(children) != root.min_group_count:
        return (
            f"{what}: minGroupCount {root.min_group_count} is not its number of child PodGroups ({len(children)});"
            " a gang of some of its groups is not placed"
        )
    basic = [g.name for g in children if g.min_count is None]
    return f"{what}: child PodGroup {basic[0]} has a basic policy (no gang.minCount)" if basic else ""


def composite_group(
    root: CompositeGroup, groups: Iterable[NativeGroup], workloads: Mapping[str, WorkloadInfo], nested: bool = False
) -> NativeGroup:
    """The root as one gang: ``minCount`` the sum of its children's, each child with its first node rank."""
    children = _children_in_order(root, groups, workloads)
    problem = _problem(root, children, nested)
    members: list[Member] = []
    first = 0
    for child in children:
        members.append(Member(child, first))
        first += child.min_count or 0
    keys = {g.topology_key for g in children}
    # the root's domain holds every child; children that all ask for the same one are kept there too (stricter
    # than one domain per child, never looser)
    topology_key = root.topology_key or (keys.pop() if len(keys) == 1 else "")
    return NativeGroup(
        namespace=root.namespace,
        name=root.name,
        uid=root.uid,
        api_version=root.api_version,
        min_count=None if problem else first,
        topology_key=topology_key,
        workload=root.workload,
        declaration=root.declaration,
        resource_claims=(),
        scheduled=root.scheduled,
        generation=root.generation,
        kind=KIND,
        members=tuple(members),
        problem=problem,
    )


def _fold_pod(pod: PodInfo, root: NativeGroup, member: Member) -> PodInfo:
    last = member.first_rank + (member.group.min_count or 0) - 1
    rank, error = pod.group_rank, pod.group_rank_error
    if rank is not None and not member.first_rank <= rank <= last and not root.problem:
        rank = None
        error = (
            f"node rank {pod.group_rank} is outside {member.first_rank}..{last}, the ranks of its PodGroup"
            f" {member.group.name} in CompositePodGroup {root.name}"
        )
    return replace(pod, group=root.name, group_rank=rank, group_rank_error=error)


def fold_composites(
    pods: Sequence[PodInfo],
    groups: Iterable[NativeGroup],
    composites: Iterable[CompositeGroup],
    workloads: Mapping[str, WorkloadInfo],
) -> tuple[Sequence[PodInfo], dict[str, NativeGroup]]:
    """Pods and PodGroups by ``namespace/name`` with every composite root folded into one group (the pods as
    given when there is nothing to fold)."""
    groups = list(groups)
    folded = {g.key: g for g in groups}
    composites = list(composites)
    if not composites and not any(g.parent for g in groups):
        return pods, folded  # the common case: nothing to fold
    parents = {object_key(c.namespace, c.parent) for c in composites if c.parent}
    roots = [c for c in composites if not c.parent]
    member_of: dict[str, tuple[NativeGroup, Member]] = {}
    for root in roots:
        whole = composite_group(root, groups, workloads, nested=root.key in parents)
        folded[whole.key] = whole
        for member in whole.members:
            folded.pop(member.group.key, None)
            member_of[member.group.key] = (whole, member)
    for group in groups:
        if group.parent and group.key not in member_of:
            # a child of no root we place (its composite not created yet, or nested): its pods wait, never
            # placed as a gang of their own that kube-scheduler would not make either
            why = f"PodGroup {group.name} belongs to CompositePodGroup {group.parent}, which is not a root that exists"
            folded[group.key] = replace(group, min_count=None, problem=why)
    out = []
    for pod in pods:
        found = member_of.get(object_key(pod.namespace, pod.group)) if pod.native and pod.group else None
        out.append(_fold_pod(pod, *found) if found is not None else pod)
    return out, folded

"""Kubernetes' composite pod groups, parsed at the edge: ``scheduling.k8s.io`` CompositePodGroups.

A CompositePodGroup (alpha in 1.37, beta in 1.38 behind the ``CompositePodGroup`` gate, served as
``v1beta1`` there) is a group of groups: PodGroups (or further composites) name it in
``spec.parentCompositePodGroupName``, and its ``schedulingPolicy.gang.minGroupCount`` says how many of those
children make the whole (``basic`` instead: each child is scheduled on its own). A JobSet whose
``spec.scheduling`` asks for a gang of gangs is compiled to one such root with one PodGroup per ReplicatedJob
(kubernetes-sigs/jobset KEP-969). Both kinds are stamped from a Workload's ``compositePodGroupTemplates``,
whose ``podGroupTemplates`` list the children in order: that order is the order of their node ranks here.

Field names and the condition were read from k8s.io/api v0.38.0-beta.0 scheduling/v1beta1 (types.go) and
k8s.io/kubernetes v1.38.0-beta.0 pkg/scheduler/schedule_one_podgroup.go: kube-scheduler writes
``CompositePodGroupInitiallyScheduled`` on the composite (reasons ``Scheduled``, ``Unschedulable``), with the
composite's generation as ``observedGeneration``, never turned back from True.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.nativegroups import DEFAULT_VERSION, SCHEDULING_GROUP, declaration

KIND = "CompositePodGroup"
SCHEDULED_CONDITION = "CompositePodGroupInitiallyScheduled"


def composite_groups_path(version: str = DEFAULT_VERSION) -> str:
    return f"/apis/{SCHEDULING_GROUP}/{version}/compositepodgroups"


def composite_status_path(namespace: str, name: str, version: str = DEFAULT_VERSION) -> str:
    return f"/apis/{SCHEDULING_GROUP}/{version}/namespaces/{namespace}/compositepodgroups/{name}/status"


@dataclass(frozen=True, slots=True)
class CompositeGroup:
    """One CompositePodGroup, as folding its children into one gang needs it."""

    namespace: str
    name: str
    uid: str
    api_version: str
    parent: str  # spec.parentCompositePodGroupName: "" for the root of a hierarchy
    min_group_count: int | None  # gang.minGroupCount; None: a basic policy (children scheduled on their own)
    topology_key: str  # "" when the composite asks for no single domain
    workload: str  # the Workload it was stamped from
    template: str  # its compositePodGroupTemplate's name in that Workload
    declaration: tuple[tuple[str, str], ...]  # its own paralleljob.dev/* annotations
    scheduled: tuple[tuple[str, str], ...] = ()  # its CompositePodGroupInitiallyScheduled (status, reason, message)
    generation: int = 0

    @property
    def key(self) -> str:
        return object_key(self.namespace, self.name)


def parse_composite_group(body: Mapping[str, Any]) -> CompositeGroup:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    count = gang.get("minGroupCount") if isinstance(gang, Mapping) else None
    topology = (spec.get("schedulingConstraints") or {}).get("topology") or []
    key = str(topology[0].get("key") or "") if topology and isinstance(topology[0], Mapping) else ""
    ref = spec.get("workloadRef") or {}
    scheduled: tuple[tuple[str, str], ...] = ()
    for condition in (body.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == SCHEDULED_CONDITION:
            scheduled = tuple((k, str(condition.get(k, ""))) for k in ("status", "reason", "message"))
    return CompositeGroup(
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        api_version=str(body.get("apiVersion") or f"{SCHEDULING_GROUP}/{DEFAULT_VERSION}"),
        parent=str(spec.get("parentCompositePodGroupName") or ""),
        min_group_count=int(count) if isinstance(count, int) else None,
        topology_key=key,
        workload=str(ref.get("workloadName") or "") if isinstance(ref, Mapping) else "",
        template=str(ref.get("templateName") or "") if isinstance(ref, Mapping) else "",
        declaration=declaration(metadata),
        scheduled=scheduled,
        generation=int(metadata.get("generation") or 0),
    )

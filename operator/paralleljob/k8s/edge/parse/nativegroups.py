"""Kubernetes' own gang API, parsed at the edge: ``scheduling.k8s.io`` PodGroups and Workloads.

Since 1.35 (``GenericWorkload``; ``v1alpha2`` in 1.36, ``v1beta1`` in 1.37 and 1.38) a pod joins a gang through
``spec.schedulingGroup.podGroupName``; its PodGroup says how many pods make the gang
(``schedulingPolicy.gang.minCount``) and may ask for one domain of a node label
(``schedulingConstraints.topology[0].key``, at most one). A PodGroup either stands alone or is stamped from a
Workload's ``podGroupTemplates`` (``workloadRef`` in v1beta1, ``podGroupTemplateRef.workload`` in v1alpha2),
as the Job controller does for an Indexed Job under ``WorkloadWithJob``. Pods of such a group that ask for
our scheduler are gang-placed like a labelled pod group (docs/pod-groups.md "Kubernetes PodGroups"); the
TP x PP x DP shape is read from the ``paralleljob.dev/*`` annotations of the PodGroup, else of its Workload,
else of the pods.

The field names were read from k8s.io/api scheduling/v1alpha2 (types.go) of 1.36 and scheduling/v1beta1 of
1.37, which renamed the Workload reference and the condition, and of 1.38 (v0.38.0-beta.0), which adds a
PodGroup's ``parentCompositePodGroupName`` (its CompositePodGroup, ``compositegroups.py``) and keeps the gang API
at v1beta1: its ``scheduling/v1`` holds only PriorityClass and the Job's scheduling types. When a release serves
PodGroups as ``v1`` the operator reads that version (the same fields as v1beta1 are assumed, and unit-tested).
Status conditions follow kube-scheduler's (pkg/scheduler/schedule_one_podgroup.go): type ``PodGroupScheduled``
(v1alpha2) or ``PodGroupInitiallyScheduled`` (v1beta1 and v1), reason ``Scheduled`` (True) or ``Unschedulable``
(False), never regressed from True.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.pods import GROUP_DECLARATION_KEYS

SCHEDULING_GROUP = "scheduling.k8s.io"
# The served version of the gang API, by Kubernetes minor (the API moved; the PodGroup's fields did not).
VERSION_BY_MINOR = {36: "v1alpha2", 37: "v1beta1", 38: "v1beta1"}
DEFAULT_VERSION = "v1beta1"
# newest first: the one watched when a server serves several (``v1`` serves PriorityClasses in every release, so
# it counts only where it lists podgroups: see :func:`served_version`)
KNOWN_VERSIONS = ("v1", "v1beta1", "v1alpha2")
# kube-scheduler's condition for a group's scheduling cycle, by API version (renamed with v1beta1)
_SCHEDULED_CONDITIONS = {
    "v1alpha2": "PodGroupScheduled",
    "v1beta1": "PodGroupInitiallyScheduled",
    "v1": "PodGroupInitiallyScheduled",
}


def lists_pod_groups(resource_list: Mapping[str, Any]) -> bool:
    """Whether an API version's discovery document (``GET /apis/scheduling.k8s.io/<version>``) lists PodGroups."""
    return any(isinstance(r, Mapping) and r.get("name") == "podgroups" for r in resource_list.get("resources") or [])


def served_version(discovery: Mapping[str, Any], v1_resources: Mapping[str, Any] | None = None) -> str:
    """The gang API version to watch, from the API group's discovery document (``GET /apis/scheduling.k8s.io``):
    the newest of :data:`KNOWN_VERSIONS` it serves; :data:`DEFAULT_VERSION` when it serves none of them.
    ``v1`` (served everywhere for PriorityClasses) counts only when its own resource list names PodGroups."""
    served = {str(v.get("version")) for v in discovery.get("versions") or [] if isinstance(v, Mapping)}
    if not lists_pod_groups(v1_resources or {}):
        served.discard("v1")
    return next((v for v in KNOWN_VERSIONS if v in served), DEFAULT_VERSION)


def scheduled_condition(version: str) -> str:
    """The condition type kube-scheduler writes for a group's scheduling cycle in this API version."""
    return _SCHEDULED_CONDITIONS.get(version.rpartition("/")[2], _SCHEDULED_CONDITIONS[DEFAULT_VERSION])


def workload_reference(version: str, workload: str, template: str) -> dict[str, Any]:
    """``spec`` fields that tie a PodGroup to the Workload template it was stamped from, in this version."""
    if version.rpartition("/")[2] == "v1alpha2":
        return {"podGroupTemplateRef": {"workload": {"workloadName": workload, "podGroupTemplateName": template}}}
    return {"workloadRef": {"workloadName": workload, "templateName": template}}


REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"


def pod_groups_path(version: str = DEFAULT_VERSION) -> str:
    return f"/apis/{SCHEDULING_GROUP}/{version}/podgroups"


def workloads_path(version: str = DEFAULT_VERSION) -> str:
    return f"/apis/{SCHEDULING_GROUP}/{version}/workloads"


def pod_group_consumer(group: NativeGroup) -> dict[str, str]:
    """The group as a ResourceClaim's consumer (``status.reservedFor`` entry), as kube-scheduler writes it."""
    return {"apiGroup": SCHEDULING_GROUP, "resource": "podgroups", "name": group.name, "uid": group.uid}


def pod_group_status_path(namespace: str, name: str, version: str = DEFAULT_VERSION) -> str:
    return f"/apis/{SCHEDULING_GROUP}/{version}/namespaces/{namespace}/podgroups/{name}/status"


def declaration(metadata: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    annotations = metadata.get("annotations") or {}
    return tuple(sorted((k, str(v)) for k, v in annotations.items() if k in GROUP_DECLARATION_KEYS))


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    namespace: str
    name: str
    declaration: tuple[tuple[str, str], ...] = ()
    # each compositePodGroupTemplate's name with its child podGroupTemplates' names, in the Workload's order
    composite_templates: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def key(self) -> str:
        return object_key(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class GroupClaim:
    """One entry of ``spec.resourceClaims``: a ResourceClaim the whole group shares, named directly or made
    from a template by the control plane (its generated name then in ``status.resourceClaimStatuses``)."""

    name: str  # the entry's name inside the PodGroup
    claim: str  # the ResourceClaim's name; "" while a template's claim has not been made yet
    template: str = ""  # resourceClaimTemplateName, when the claim comes from a template


@dataclass(frozen=True, slots=True)
class NativeGroup:
    """One PodGroup, as placement and status need it."""

    namespace: str
    name: str
    uid: str
    api_version: str
    min_count: int | None  # gang.minCount; None: a basic (non-gang) policy, which we do not place as a gang
    topology_key: str  # "" when the group asks for no single domain
    workload: str  # the Workload it was stamped from ("" for a standalone PodGroup)
    declaration: tuple[tuple[str, str], ...]  # its own paralleljob.dev/* annotations
    resource_claims: tuple[GroupClaim, ...]  # spec.resourceClaims: claims the whole group shares
    scheduled: tuple[tuple[str, str], ...] = ()  # its scheduling-cycle condition (status, reason, message)
    generation: int = 0  # metadata.generation: the condition's observedGeneration, as kube-scheduler sets it
    parent: str = ""  # spec.parentCompositePodGroupName: its CompositePodGroup ("" for a standalone group)
    template: str = ""  # the Workload template it was stamped from
    # A CompositePodGroup folded into one gang (plan/groups/composites.py) is one of these too: its kind, its
    # child PodGroups with the first node rank of each, and why it cannot be placed as one gang ("" if it can)
    kind: str = "PodGroup"
    members: tuple[Member, ...] = ()
    problem: str = ""

    @property
    def key(self) -> str:
        return object_key(self.namespace, self.name)

    @property
    def scheduled_condition(self) -> str:
        return scheduled_condition(self.api_version)

    def scheduled_field(self, name: str) -> str:
        return dict(self.scheduled).get(name, "")


@dataclass(frozen=True, slots=True)
class Member:
    """A child PodGroup of a composite placed as one gang, and the first node rank of its contiguous range."""

    group: NativeGroup
    first_rank: int


def _names(templates: Any) -> tuple[str, ...]:
    return tuple(str(t.get("name")) for t in templates or [] if isinstance(t, Mapping) and t.get("name"))


def parse_workload(body: Mapping[str, Any]) -> WorkloadInfo:
    metadata = body.get("metadata") or {}
    composites = tuple(
        (str(t.get("name")), _names(t.get("podGroupTemplates")))
        for t in (body.get("spec") or {}).get("compositePodGroupTemplates") or []
        if isinstance(t, Mapping) and t.get("name")
    )
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    return WorkloadInfo(namespace, name, declaration(metadata), composites)


def parse_pod_group(body: Mapping[str, Any]) -> NativeGroup:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    min_count: int | None = None
    if isinstance(gang, Mapping) and isinstance(gang.get("minCount"), int):
        min_count = int(gang["minCount"])
    topology = (spec.get("schedulingConstraints") or {}).get("topology") or []
    key = ""
    if topology and isinstance(topology[0], Mapping):
        key = str(topology[0].get("key") or "")
    ref = spec.get("workloadRef") or ((spec.get("podGroupTemplateRef") or {}).get("workload")) or {}
    ref_ok = isinstance(ref, Mapping)
    made = {
        str(c.get("name")): str(c.get("resourceClaimName") or "")
        for c in (body.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(c, Mapping)
    }
    claims = tuple(
        GroupClaim(
            str(c["name"]),
            str(c.get("resourceClaimName") or made.get(str(c["name"]), "")),
            str(c.get("resourceClaimTemplateName") or ""),
        )
        for c in spec.get("resourceClaims") or []
        if isinstance(c, Mapping) and c.get("name")
    )
    api_version = str(body.get("apiVersion") or f"{SCHEDULING_GROUP}/{DEFAULT_VERSION}")
    condition_type = scheduled_condition(api_version)
    scheduled: tuple[tuple[str, str], ...] = ()
    for condition in (body.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == condition_type:
            scheduled = tuple((k, str(condition.get(k, ""))) for k in ("status", "reason", "message"))
    return NativeGroup(
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        api_version=api_version,
        min_count=min_count,
        topology_key=key,
        workload=str(ref.get("workloadName") or "") if ref_ok else "",
        declaration=declaration(metadata),
        resource_claims=claims,
        scheduled=scheduled,
        generation=int(metadata.get("generation") or 0),
        parent=str(spec.get("parentCompositePodGroupName") or ""),
        template=str(ref.get("templateName") or ref.get("podGroupTemplateName") or "") if ref_ok else "",
    )


def declaration_of(
    group: NativeGroup, workloads: Mapping[str, WorkloadInfo], pod_declaration: tuple[tuple[str, str], ...]
) -> dict[str, str]:
    """The group's ``paralleljob.dev/*`` settings: the PodGroup's own win over its Workload's, which win over
    the pods' (a Job's pod template), key by key."""
    merged = dict(pod_declaration)
    workload = workloads.get(object_key(group.namespace, group.workload)) if group.workload else None
    if workload is not None:
        merged.update(workload.declaration)
    merged.update(group.declaration)
    return merged

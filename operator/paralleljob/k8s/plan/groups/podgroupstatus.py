"""The status the operator writes on a Kubernetes PodGroup it places (docs/pod-groups.md "Kubernetes PodGroups").

kube-scheduler reports a pod group's scheduling cycle as a condition (``PodGroupScheduled`` in the v1alpha2
API of 1.36, ``PodGroupInitiallyScheduled`` in v1beta1 of 1.37; the group's own version picks it): ``True`` with
reason ``Scheduled`` once the gang is placed, ``False`` with reason ``Unschedulable`` and why not
otherwise, and never turns a ``True`` back to ``False`` (pkg/scheduler/schedule_one_podgroup.go). We say the
same from the adopting ParallelJob's state: ``True`` once every pod is bound (phase Running, Recovering or
Succeeded), ``False`` while it waits (Pending or Queued), with the reason the ParallelJob's own conditions
give (pods missing, no domain of the topology key with room, queue, quota). A CompositePodGroup placed as one
gang (``composites.py``) says ``CompositePodGroupInitiallyScheduled`` the same way, and each of its child
PodGroups its own condition with its node ranks, as kube-scheduler 1.38 writes both after one cycle for the whole
tree. Pure: the reconciler writes what this returns, and only when it differs from what the group already says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.constants import SCHEDULER_NAME
from paralleljob.k8s.edge.parse.compositegroups import KIND as COMPOSITE_KIND
from paralleljob.k8s.edge.parse.compositegroups import SCHEDULED_CONDITION as COMPOSITE_SCHEDULED
from paralleljob.k8s.edge.parse.nativegroups import (
    REASON_SCHEDULED,
    REASON_UNSCHEDULABLE,
    NativeGroup,
    scheduled_condition,
)
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.plan.groups.podgroups import READY_CONDITION
from paralleljob.k8s.plan.kinds.native import NATIVE_GROUP
from paralleljob.k8s.plan.kinds.picker import kind_of

REFUSED = f"{SCHEDULER_NAME} does not place this PodGroup: "
BOUND_PHASES = (Phase.RUNNING, Phase.RECOVERING, Phase.SUCCEEDED)
WAITING_PHASES = (Phase.PENDING, Phase.QUEUED)


@dataclass(frozen=True, slots=True)
class PodGroupCondition:
    namespace: str
    name: str
    uid: str
    api_version: str
    status: str  # "True" | "False"
    reason: str
    message: str
    generation: int = 0
    kind: str = "PodGroup"  # or CompositePodGroup, whose condition has a name of its own

    @property
    def condition_type(self) -> str:
        return COMPOSITE_SCHEDULED if self.kind == COMPOSITE_KIND else scheduled_condition(self.api_version)

    def condition(self, now: str) -> dict[str, Any]:
        return {
            "type": self.condition_type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": now,
            "observedGeneration": self.generation,
        }


def _condition(job: JobObject, kind: str) -> Mapping[str, Any]:
    return job.status.condition(kind)


def _why_waiting(job: JobObject) -> str:
    """The ParallelJob's own reason for not placing yet: pods missing first, then the placement's refusal."""
    for kind in (READY_CONDITION, "Placed"):
        condition = _condition(job, kind)
        if condition.get("status") == "False" and condition.get("message"):
            return f"{condition.get('reason', '')}: {condition['message']}"
    return f"queued by {SCHEDULER_NAME}"


def _cost(job: JobObject) -> str:
    cost = job.status.raw.get("communicationCost") or {}
    total = cost.get("totalMs") if isinstance(cost, Mapping) else None
    return f"; communication cost {float(total):.1f} ms per step" if isinstance(total, int | float) else ""


def _changed(group: NativeGroup, status: str, reason: str, message: str) -> PodGroupCondition | None:
    if group.scheduled_field("status") == "True" and status == "False":
        return None  # as kube-scheduler: a scheduled group is not reported unschedulable again
    current = (group.scheduled_field("status"), group.scheduled_field("reason"), group.scheduled_field("message"))
    if current == (status, reason, message):
        return None
    return PodGroupCondition(
        group.namespace, group.name, group.uid, group.api_version, status, reason, message, group.generation, group.kind
    )


def desired_conditions(job: JobObject, group: NativeGroup) -> list[PodGroupCondition]:
    """What the PodGroup should say now, and for a composite what it and each child PodGroup should say, as
    kube-scheduler writes both after one cycle for the whole tree; only those that do not say it already."""
    if job.phase in BOUND_PHASES:
        bound = len((job.status.raw.get("placement") or {}).get("pods") or []) or group.min_count or 0
        status, reason = "True", REASON_SCHEDULED
        message = f"all {bound} pods placed as one gang by {SCHEDULER_NAME}{_cost(job)}"
    elif job.phase in WAITING_PHASES:
        status, reason, message = "False", REASON_UNSCHEDULABLE, _why_waiting(job)
    else:
        return []
    wanted = [_changed(group, status, reason, message)]
    for member in group.members:
        child = member.group
        ranks = f"node ranks {member.first_rank}..{member.first_rank + (child.min_count or 1) - 1}"
        if status == "True":
            said = f"placed with CompositePodGroup {group.name} as one gang by {SCHEDULER_NAME}: its {ranks}"
        else:
            said = f"CompositePodGroup {group.name} ({ranks} of {group.min_count}) waits: {message}"
        wanted.append(_changed(child, status, reason, said))
    return [w for w in wanted if w is not None]


def pod_group_conditions(jobs: Sequence[JobObject], groups: Mapping[str, NativeGroup]) -> list[PodGroupCondition]:
    """Every PodGroup (and CompositePodGroup) whose scheduling-cycle condition is out of date, from its
    adopting ParallelJob."""
    out: list[PodGroupCondition] = []
    if not groups:
        return out  # the common case, asked on every pass: no job list to walk
    for job in jobs:
        group = groups.get(job.key)
        # a ParallelJob of the PodGroup's name stays a ParallelJob: only a pod group's adopter writes its status
        if group is None or job.request is None or kind_of(job.request, native=True) is not NATIVE_GROUP:
            continue
        out.extend(desired_conditions(job, group))
    return out


def refusal_conditions(refused: Mapping[str, str], groups: Mapping[str, NativeGroup]) -> list[PodGroupCondition]:
    """``Unschedulable`` with the reason for each PodGroup whose pods ask for our scheduler but which is not
    adopted (``pods/podowners``: a gang smaller than its pods, no gang policy, a shape that does not add up),
    where ``kubectl describe podgroup`` shows it; only those that do not say it already."""
    out: list[PodGroupCondition] = []
    for key, why in refused.items():
        group = groups.get(key)
        if group is None or group.scheduled_field("status") == "True":
            continue
        message = REFUSED + why
        if (group.scheduled_field("reason"), group.scheduled_field("message")) == (REASON_UNSCHEDULABLE, message):
            continue
        named = (group.namespace, group.name, group.uid, group.api_version)
        # a composite's refusal goes on the CompositePodGroup (its own condition type), as a PodGroup's on it
        out.append(PodGroupCondition(*named, "False", REASON_UNSCHEDULABLE, message, group.generation, group.kind))
    return out

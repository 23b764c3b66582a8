"""The native PodGroup kind: a pod group declared through Kubernetes' own gang objects (a ``PodGroup`` and its
``Workload``), adopted like any pod group (``kinds/adopted``), whose pods may also bring ResourceClaims: the
group waits until its claims are allocated, and each claim is reserved for the group before its first bind.
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.groups.groupclaims import reservations
from paralleljob.k8s.plan.groups.podgroups import hold_for_claims
from paralleljob.k8s.plan.kinds.adopted import AdoptedGroup


class NativeGroup(AdoptedGroup):
    name = "native PodGroup"

    def claims_ready(self, ctx: PassContext, actions: JobActions, job: JobObject) -> bool:
        native = ctx.pod_groups.get(job.key)
        return native is None or hold_for_claims(actions, native, ctx.resource_claims, ctx.now)

    def finish(self, ctx: PassContext, actions: JobActions, pods: Sequence[PodInfo], active: bool) -> None:
        super().finish(ctx, actions, pods, active)
        native = ctx.pod_groups.get(actions.job.key)
        if native is not None and native.resource_claims and actions.binds:
            actions.reserves = reservations(native, ctx.resource_claims)  # before the first bind


NATIVE_GROUP = NativeGroup()

"""A Kubernetes PodGroup's shared ResourceClaims (``spec.resourceClaims``, the ``DRAWorkloadResourceClaims``
gate of 1.36): one claim the whole gang uses, e.g. an IMEX/ComputeDomain channel or a shared fabric device.

kube-scheduler, placing such a group, allocates the claim once and reserves it for the PodGroup (a
``status.reservedFor`` entry naming the PodGroup, not each pod), and every pod must then land on a node the
allocation can be used from (``status.allocation.nodeSelector``). We do the same except the allocation: the
operator allocates its own GPU claims on DRA nodes, not arbitrary device requests (it evaluates no CEL
selectors), so a group waits until its claims exist and are allocated (by their driver's controller, an
admin, or an earlier consumer), with the reason in ``PodGroupReady``; then the gang is placed only on nodes the
allocations admit, and each claim is reserved for the PodGroup before the first pod is bound.

Claims are read from the operator's ResourceClaim watch, which runs with DRA on (``--dra-driver``); without
it no claim is seen, and the group waits saying so.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.edge.parse.dra import ClaimInfo
from paralleljob.k8s.edge.parse.matching import Term
from paralleljob.k8s.edge.parse.nativegroups import NativeGroup, pod_group_consumer

WAITING_FOR_CLAIM = "WaitingForClaim"


@dataclass(frozen=True, slots=True)
class ClaimReserve:
    """Add the PodGroup to a claim's ``status.reservedFor``: the entries already there plus ours, written with
    the claim's resourceVersion so that a concurrent writer's entry is never lost (409: read and try again)."""

    namespace: str
    name: str
    body: dict[str, Any]


def claim_wait(group: NativeGroup, claims: Mapping[str, ClaimInfo]) -> str:
    """Why the group's claims do not allow it to be placed yet ("" when they do)."""
    for entry in group.resource_claims:
        if not entry.claim:
            return (
                f"PodGroup claim {entry.name!r}: the ResourceClaim from template {entry.template!r} has not been made"
                " yet (status.resourceClaimStatuses names none)"
            )
        info = claims.get(f"{group.namespace}/{entry.claim}")
        if info is None:
            return (
                f"PodGroup claim {entry.name!r}: ResourceClaim {group.namespace}/{entry.claim} is not there (or not"
                " seen: the operator watches ResourceClaims only with DRA on, --dra-driver)"
            )
        if not info.allocated:
            return (
                f"PodGroup claim {entry.name!r}: ResourceClaim {entry.claim} is not allocated; paralleljob-scheduler"
                " does not allocate a group's shared claims (it evaluates no device selectors): its driver's"
                " controller or an earlier consumer must"
            )
        if info.node_terms == ():
            return f"PodGroup claim {entry.name!r}: the node selector of {entry.claim}'s allocation cannot be read"
    return ""


def claim_terms(group: NativeGroup, claims: Mapping[str, ClaimInfo]) -> tuple[Term, ...] | None:
    """Required node affinity meaning "every claim's allocation can be used here": the terms of one claim, the
    pairwise merge of several (each claim's selector must hold); None when no allocation restricts the nodes."""
    per_claim = [
        info.node_terms
        for entry in group.resource_claims
        if (info := claims.get(f"{group.namespace}/{entry.claim}")) is not None and info.node_terms is not None
    ]
    return and_terms(per_claim) if per_claim else None


def and_terms(selectors: Sequence[Sequence[Term] | None]) -> tuple[Term, ...] | None:
    """Several required node affinities that must all hold, as one (OR of terms, each an AND): the product of
    their terms. None stands for "no constraint" and drops out."""
    given = [tuple(s) for s in selectors if s is not None]
    if not given:
        return None
    return tuple(
        Term(
            tuple(r for term in combo for r in term.expressions),
            tuple(r for term in combo for r in term.fields),
        )
        for combo in itertools.product(*given)
    )


def reservations(group: NativeGroup, claims: Mapping[str, ClaimInfo]) -> list[ClaimReserve]:
    """The writes that reserve each of the group's claims for it; none for a claim reserved for it already."""
    out = []
    for entry in group.resource_claims:
        info = claims.get(f"{group.namespace}/{entry.claim}")
        if info is None or group.uid in info.reserved_for:
            continue
        consumers = [dict(c) for c in info.consumers] + [pod_group_consumer(group)]
        body = {"metadata": {"resourceVersion": info.resource_version}, "status": {"reservedFor": consumers}}
        out.append(ClaimReserve(info.namespace, info.name, body))
    return out

"""The device-plugin nodes' MIG slices as the core's count model sees them (``core.slices.pools``), built for one
pass from the kept view, and what breaks under a slice the device plugin placed.

A device-plugin MIG node (``ClusterView.pools``) offers ``nvidia.com/mig-<profile>: N`` (``NodeInfo.mig``).
What is taken there is counted, per profile, from the operator's records (one per rank, node and profile:
the device plugin picks the GPU), the slices placed earlier in the pass, and every other bound, unfinished
pod that requests ``nvidia.com/mig-<profile>`` there (another scheduler's, or one of ours no record names).

What the operator cannot know: which GPU under a node's slices a pod got. So a GPU reported unhealthy on such
a node closes the whole node to new slices and fails every slice job on it (all profiles the node offers:
mig-manager's ``all-*`` configurations give every GPU the same layout, so every GPU carries every profile),
each through its own failure policy; a node that stops offering a job's profile (re-partitioned) fails the
jobs of that profile there too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from paralleljob.core.failure.repair import FailureKind
from paralleljob.core.slices.pools import PoolPlacement, ProfilePool
from paralleljob.k8s.edge.parse.matching import untolerated
from paralleljob.k8s.edge.parse.migdevices import MIG_CONFIG_STATE_LABEL, MIG_RESOURCE_PREFIX
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.admission.eligibility import node_refusal
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.view.clusterview import ClusterView

Use = Mapping[str, Mapping[str, int]]  # node -> profile -> slices


def pod_mig_requests(pod: PodInfo) -> dict[str, int]:
    """profile -> the ``nvidia.com/mig-<profile>`` slices the pod requests."""
    return {
        name.removeprefix(MIG_RESOURCE_PREFIX): amount
        for name, amount in pod.requests
        if name.startswith(MIG_RESOURCE_PREFIX) and amount > 0
    }


def foreign_use(pods: Iterable[PodInfo], view: ClusterView) -> dict[str, dict[str, int]]:
    """node -> profile -> slices that bound, unfinished pods on device-plugin MIG nodes hold which no loaded
    record names (a pod of a record on the record's node is counted from the record instead)."""
    out: dict[str, dict[str, int]] = {}
    for pod in pods:
        if not pod.bound or pod.terminal or pod.node not in view.pools or not pod.requests:
            continue
        asked = pod_mig_requests(pod)
        if not asked:
            continue
        claim = view.loaded.get(pod.job_key) if pod.job_key is not None else None
        slot = claim.record.slot_named(pod.name) if claim is not None and claim.uid == pod.owner_uid else None
        if slot is not None and slot.node == pod.node and slot.mig is not None and not slot.mig.exact:
            continue
        used = out.setdefault(pod.node, {})
        for profile, amount in asked.items():
            used[profile] = used.get(profile, 0) + amount
    return out


def recorded_use(view: ClusterView) -> dict[str, dict[str, int]]:
    """node -> profile -> slices the loaded records give the device plugin's nodes."""
    out: dict[str, dict[str, int]] = {}
    for claim in view.loaded.values():
        if claim.record.pooled:
            for slot in claim.record.slots:
                if slot.mig is not None:
                    used = out.setdefault(slot.node, {})
                    used[slot.mig.profile] = used.get(slot.mig.profile, 0) + 1
    return out


def placed_use(placed: Mapping[str, Sequence[str]]) -> dict[str, dict[str, int]]:
    """The pass's placements (``PassContext.pool_slices_placed``: node -> a profile per slice) as counts."""
    out: dict[str, dict[str, int]] = {}
    for node, profiles in placed.items():
        used = out.setdefault(node, {})
        for profile in profiles:
            used[profile] = used.get(profile, 0) + 1
    return out


def held_at_start(pods: Iterable[PodInfo], view: ClusterView) -> dict[str, dict[str, int]]:
    """What the records and the other pods hold on each device-plugin node as a pass begins (worked out once
    a pass, ``PassContext.pool_held``, not once per slice job: a pass may look at many waiting ones)."""
    if not view.pools:
        return {}
    out = recorded_use(view)
    for node, profiles in foreign_use(pods, view).items():
        used = out.setdefault(node, {})
        for profile, n in profiles.items():
            used[profile] = used.get(profile, 0) + n
    return out


def pool_mig_gpus(view: ClusterView) -> int:
    """The GPUs in MIG mode of the device-plugin nodes where the operator's jobs hold slices (all of a node's:
    which of them hold the slices is the device plugin's secret); what ``paralleljob_sliced_gpus`` adds for them."""
    if not view.pools:
        return 0
    return sum(
        info.mig.mig_gpus for name in recorded_use(view) if (info := view.pools.get(name)) is not None and info.mig
    )


def unhealthy(info: NodeInfo) -> str:
    """Why the node's MIG slices must not run work ("" when they may): the node is down, or a GPU under them
    is reported unhealthy (which slices it holds is the device plugin's secret)."""
    if not info.runs_work:
        return info.why_closed()
    if info.unhealthy_gpus:
        return f"GPU {','.join(map(str, sorted(info.unhealthy_gpus)))} on {info.name} reported unhealthy"
    if info.gpu_condition_false:
        return f"the health agent reports {info.name}'s GPUs unhealthy"
    return ""


def closed(info: NodeInfo, request: JobRequest | None) -> str:
    """Why the node takes no new slice (of ``request``'s job, when given): down, cordoned, a GPU unhealthy,
    mig-manager not done, or the job's constraints (product, selector, affinity, requests, taints)."""
    if why := unhealthy(info):
        return why
    if not info.takes_new_work:
        return info.why_closed()
    if info.mig is not None and not info.mig.ready:
        return f"{MIG_CONFIG_STATE_LABEL} is {info.labels.get(MIG_CONFIG_STATE_LABEL)!r}, not success"
    if request is None:
        return ""
    if why := node_refusal(info, request.constraints, request.gpu_product):
        return why
    taint = untolerated(info.taints, request.constraints.tolerations)
    return f"taint {taint} is not tolerated" if taint is not None else ""


def pool_nodes(view: ClusterView, used: Sequence[Use], request: JobRequest | None = None) -> list[ProfilePool]:
    """The device-plugin MIG nodes as :class:`ProfilePool` values, with what ``used`` (added up) takes on
    each; a node closed to ``request``'s job is in the list, closed, so its refusal says why."""
    out = []
    for name, info in sorted(view.pools.items()):
        offer = info.mig
        if offer is None:
            continue
        taken: dict[str, int] = {}
        for table in used:
            for profile, n in table.get(name, {}).items():
                taken[profile] = taken.get(profile, 0) + n
        index = view.node_index.get(name)
        whole_used = index is not None and any(view.state.owner[g] is not None for g in view.topology.node_gpus(index))
        out.append(
            ProfilePool(
                name,
                info.clique or name,
                offer.counts,
                tuple(sorted(taken.items())),
                whole_used,
                closed(info, request),
            )
        )
    return out


def held_pool_slices(pools: Sequence[ProfilePool], record: PlacementRecord) -> list[PoolPlacement | None]:
    """The record's slices as the core's placements (None: the node is no longer a MIG pool)."""
    names = {p.node for p in pools}
    return [
        PoolPlacement(s.node, s.mig.profile, "") if s.mig is not None and s.node in names else None
        for s in record.slots
    ]


def pool_breakage(view: ClusterView, record: PlacementRecord) -> Breakage | None:
    """What broke under a record of device-plugin slices: a node gone or down (NODE), a GPU reported unhealthy
    on a node (GPU: every rank there, since the operator cannot tell which GPU each rank got), or a node that
    no longer offers the rank's profile (GPU); None when nothing did."""
    causes: dict[str, list[int]] = {}
    node_down = False
    for rank, slot in enumerate(record.slots):
        info = view.pools.get(slot.node)
        profile = slot.mig.profile if slot.mig is not None else ""
        if info is None or info.mig is None:
            if view.nodes.get(slot.node) is None and slot.node not in view.pools:
                cause, node_down = f"node {slot.node} is gone", True
            else:
                cause = f"node {slot.node} no longer offers MIG slices ({MIG_RESOURCE_PREFIX}<profile>)"
        elif not info.runs_work:
            cause, node_down = info.why_closed(), True
        elif why := unhealthy(info):
            cause = (
                f"{why}: the device plugin picked each slice's GPU there, so every slice job on {slot.node} is"
                " failed (the operator cannot tell which slices that GPU held)"
            )
        elif not info.mig.count(profile):
            cause = f"node {slot.node} no longer offers {MIG_RESOURCE_PREFIX}{profile} (MIG re-partitioned)"
        else:
            continue
        causes.setdefault(cause, []).append(rank)
    if not causes:
        return None
    ranks = tuple(sorted(r for found in causes.values() for r in found))
    message = "; ".join(
        f"{cause} (pods {', '.join(record.slots[r].name for r in found)})" for cause, found in causes.items()
    )
    nodes = tuple(dict.fromkeys(record.slots[r].node for r in ranks))
    kind = FailureKind.NODE if node_down else FailureKind.GPU
    return Breakage(kind, ranks, nodes, tuple(record.slots[r].name for r in ranks), message)

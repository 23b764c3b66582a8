"""Pod groups on NVLink trays (GB200/GB300 NVL72): a group whose pods each take a whole tray, fewer GPUs than
its TP, so that each TP group spans trays of one clique (docs/pod-groups.md, "On NVL72 racks").

Such a group is recognised from its pods (each asks for ``w`` GPUs, ``w`` < TP and dividing it): it has
TP x PP x DP / w pods, numbered by node rank as a ParallelJob's tray pods are (``core/nvl72/traypods``), and is
placed by the NVLink placer inside one clique (``trayadmission.place_tray_group``), recorded as a tray record.
Its ComputeDomain is the clique's, named as a tray job's (``computedomain.compute_domain_name``), but with a
channel claim template of a fixed name, ``<group>-nvlink-channel``: a pod's ``spec.resourceClaims`` cannot
be changed once it exists (the API server refuses it even while the pod is scheduling-gated), and another
controller makes the pods before the clique is chosen, so the pod template must name that template itself.
A pod that does not is refused with the reason, and the group waits as ``InvalidPodGroup``. One template
name for every pod is also why the group stays inside one clique.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from paralleljob.core.job import JobSpec
from paralleljob.k8s.edge.constants import GPU_RESOURCE
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.render.computedomain import CLAIM_NAME, group_channel_template
from paralleljob.k8s.edge.render.traymanifests import compute_domains
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.edge.status.trayrecords import TraySlot


def tray_width(spec: JobSpec, pods: Iterable[PodInfo]) -> int:
    """GPUs per pod when the group's pods each hold a slice of a TP group (a whole tray each); 0 when each
    pod is one TP group (or the pods say nothing yet). The first live pod speaks: they share a template."""
    gpus = next((p.first_container_gpus for p in pods if not p.deleting and not p.terminal), 0)
    return gpus if 0 < gpus < spec.tp and spec.tp % gpus == 0 else 0


def expected_pods(spec: JobSpec, width: int) -> int:
    """How many pods (node ranks) the group has: one per TP group, or one per tray of ``width`` GPUs."""
    return spec.num_gpus // width if width else spec.pp * spec.dp


def tray_problems(pod: PodInfo, spec: JobSpec, width: int, group: str) -> list[str]:
    """Why ``pod`` cannot be one tray of a group of ``width``-GPU pods (none when it can)."""
    out = []
    if pod.first_container_gpus != width or pod.gpus != width:
        out.append(
            f"pod {pod.name} must request {GPU_RESOURCE}: {width} on its first container and no other GPUs, as the"
            f" group's other pods (one pod is one tray of a TP{spec.tp} group); it requests"
            f" {pod.first_container_gpus} there, {pod.gpus} in all"
        )
    template = group_channel_template(group)
    if pod.channel_template != template:
        out.append(
            f"pod {pod.name} takes a slice of a TP{spec.tp} group, which needs NVLink across trays through its"
            f" clique's ComputeDomain: its template must name the channel claim, spec.resourceClaims"
            f" [{{name: {CLAIM_NAME}, resourceClaimTemplateName: {template}}}] and resources.claims"
            f" [{{name: {CLAIM_NAME}}}] on its first container (a pod's claims cannot be added once it exists)"
        )
    return out


def slot_rank(record: PlacementRecord, slot: PodSlot | TraySlot) -> int:
    """The node rank of a slot of either layout: a tray's own, a TP-group slot's under the rank order."""
    return slot.node_rank if isinstance(slot, TraySlot) else record.node_rank(slot)


def group_domains(job: JobObject, record: PlacementRecord) -> list[dict[str, Any]]:
    """The group's ComputeDomain(s) for a tray record (none otherwise), with the channel template its pods name."""
    return compute_domains(job, record, group_channel_template(job.name))  # none without trays


def clique_trays(cliques: Sequence[Sequence[int]], record_nodes: Iterable[int]) -> list[int] | None:
    """The trays of the clique a group's record uses (``cliques``: each clique's trays): a repair stays there,
    since the pods name that clique's channel template. None when the record's trays are in no known clique."""
    used = set(record_nodes)
    for trays in cliques:
        if used & set(trays):
            return list(trays)
    return None

"""The objects a job on whole trays of NVLink cliques needs: its ComputeDomains and its tray pods.

A tray record (k8s/edge/status/trayrecords) names, per pod, a tray, its GPUs and the clique it is in. The job gets
one ComputeDomain per clique, numbered in node-rank order (``computedomain.domains_for``), owned by the job so
the garbage collector removes it (and the claim template and claims the driver made for it) with the job.
Each tray pod is the job's pod template made the way a TP-group pod is (``manifests.pod_from_template``: the
operator binds it; ``tray_env_at`` says what torchrun needs), taking the whole tray's GPUs and referencing
its clique's channel claim template.
"""

from __future__ import annotations

from typing import Any

from paralleljob.k8s.edge.constants import (
    GPU_INDICES_ANNOTATION,
    INCARNATION_ANNOTATION,
    JOB_LABEL,
    MANAGED_LABEL,
    MANAGED_VALUE,
    NODE_RANK_LABEL,
    TARGET_NODE_ANNOTATION,
)
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.render.manifests import PodParts, owner_reference, pod_from_template
from paralleljob.k8s.edge.render.trayenv import TrayJob, tray_env_at
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.edge.status.trayrecords import TraySlot


def job_domains(job: str, record: PlacementRecord) -> dict[str, str]:
    """clique -> the name of the job's ComputeDomain there (empty for a record without trays)."""
    return cd.domains_for(job, [t.clique for t in sorted(record.trays, key=lambda t: t.node_rank)])


def compute_domains(job: JobObject, record: PlacementRecord, template: str = "") -> list[dict[str, Any]]:
    """The job's ComputeDomains: one per clique its trays use, owned by the job; ``template``: the channel
    claim template's name when the pods name it themselves (a pod group's, ``cd.group_channel_template``)."""
    labels = {JOB_LABEL: job.name, MANAGED_LABEL: MANAGED_VALUE}
    return [
        cd.compute_domain_manifest(job.namespace, name, clique, owner_reference(job), labels, template)
        for clique, name in job_domains(job.name, record).items()
    ]


def tray_pod(job: JobObject, request: JobRequest, record: PlacementRecord, tray: TraySlot) -> dict[str, Any]:
    """One whole-tray worker: all of ``tray.node``'s recorded GPUs, its clique's channel claim."""
    labels = {JOB_LABEL: job.name, NODE_RANK_LABEL: str(tray.node_rank), MANAGED_LABEL: MANAGED_VALUE}
    annotations = {
        GPU_INDICES_ANNOTATION: ",".join(str(i) for i in tray.gpu_indices),
        TARGET_NODE_ANNOTATION: tray.node,
        INCARNATION_ANNOTATION: str(tray.incarnation),
        cd.CLIQUE_ANNOTATION: tray.clique,
    }
    nproc = len(tray.gpu_indices)
    shape = TrayJob(job.name, job.namespace, record.tp, record.pp, record.dp, record.rank_order)
    env = tray_env_at(shape, len(record.pod_slots), tray.node_rank, nproc, tray.clique)
    pod = pod_from_template(job, request, PodParts(tray.name, labels, annotations, env, nproc))
    return cd.with_channel_claim(pod, job_domains(job.name, record)[tray.clique])

"""Which of a tray job's ComputeDomains to delete: those of cliques its placement no longer uses.

A job on whole trays gets one ComputeDomain per clique (``edge/render/traymanifests``), named after the clique. A
repair that leaves a clique, a re-optimisation or a requeue leaves the ComputeDomain of a clique behind; the
garbage collector would only remove it with the job. The rule is level-triggered, so an operator killed at
any point converges on the next pass: from the ComputeDomains that exist (watched by our label, owned by the
job's UID) and the job's recorded placement, a ComputeDomain is deleted when

- its job's recorded placement (and what this pass writes for it) uses no tray of its clique: a requeued or
  finished job uses none;
- the job's chain is not running (``busy``: the placement being written is not the stored one yet);
- no pod of the job is left on, or headed for, a node of its clique (any pod object, terminating and
  finished ones too: its channel claim is released only once the pod is gone). Old pods are deleted by the
  re-placement first; their deletion is the event that brings the next pass, which deletes the domain.

A ComputeDomain whose clique annotation is missing counts as used by any pod of its job.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.render.computedomain import DomainInfo
from paralleljob.k8s.edge.render.traymanifests import job_domains
from paralleljob.k8s.plan.actions import DomainDelete, JobActions

HOLDING = (Phase.PLACING, Phase.RUNNING, Phase.RECOVERING)  # the phases whose recorded placement is in use


def stale_domains(
    domains: Iterable[DomainInfo],
    jobs: Mapping[str, JobObject],
    pods_of: Mapping[str, Sequence[PodInfo]],
    nodes: Mapping[str, NodeInfo],
    busy: Collection[str],
    decided: Sequence[JobActions],
) -> list[DomainDelete]:
    """The ComputeDomains to delete now; ``decided``: this pass's decisions (the ComputeDomains they create
    for a new placement are kept, though the stored record does not name them yet)."""
    domains = list(domains)
    if not domains:
        return []
    by_uid = {job.uid: job for job in jobs.values()}
    creating = {a.job.key: {d["metadata"]["name"] for d in a.compute_domains} for a in decided if a.compute_domains}
    out: list[DomainDelete] = []
    for domain in domains:
        job = by_uid.get(domain.owner_uid)
        if domain.deleting or job is None or job.key in busy or job.namespace != domain.namespace:
            continue  # a job that is gone takes its ComputeDomains along (the garbage collector)
        if domain.name in _wanted(job) or domain.name in creating.get(job.key, ()):
            continue
        if _in_use(domain, pods_of.get(job.key, ()), nodes):
            continue
        out.append(DomainDelete(job, domain.namespace, domain.name, domain.uid, _why(job, domain)))
    return out


def _wanted(job: JobObject) -> Collection[str]:
    record = job.record
    if job.phase not in HOLDING or record is None:
        return ()
    return job_domains(job.name, record).values()  # none for a record without trays


def _in_use(domain: DomainInfo, pods: Sequence[PodInfo], nodes: Mapping[str, NodeInfo]) -> bool:
    for pod in pods:
        if not domain.clique or not (pod.node or pod.target_node):
            return True
        for name in (pod.node, pod.target_node):
            node = nodes.get(name) if name else None
            if name and (node is None or node.clique == domain.clique):
                return True  # a pod on a node we cannot see may be in that clique: wait for it to go
    return False


def _why(job: JobObject, domain: DomainInfo) -> str:
    where = f"clique {domain.clique}" if domain.clique else "its clique"
    if job.phase not in HOLDING or job.record is None or not job_domains(job.name, job.record):
        return f"{job.key} holds no trays ({job.phase.value}): its ComputeDomain of {where} is no longer used"
    return f"{job.key} no longer uses {where}: its placement moved"

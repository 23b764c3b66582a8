"""Whose pods are whose, at the start of a pass: each ParallelJob's worker pods, the orphans whose
ParallelJob is gone (to delete), and the pods of each adopted pod group, with an adopting ParallelJob to
create for a group that has none yet. What it finds goes into the pass's :class:`Plan` (orphans, adoptions,
warnings); nothing here decides a job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paralleljob.k8s.edge.parse.nativegroups import NativeGroup, WorkloadInfo
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.plan.actions import Plan, PodDelete
from paralleljob.k8s.plan.groups.podgroups import GroupDeclarationError, adopting_manifest, successors
from paralleljob.k8s.plan.kinds.picker import kind_of
from paralleljob.k8s.plan.pods.podsync import must_force


def worker_pods(
    pods: Sequence[PodInfo],
    jobs: Mapping[str, JobObject],
    nodes: Mapping[str, NodeInfo],
    namespaces: Sequence[str],
    plan: Plan,
) -> dict[str, list[PodInfo]]:
    """Each job's worker pods; a worker whose ParallelJob is gone becomes an orphan to delete (in a
    namespace this operator serves (``namespaces``; empty: all): elsewhere its job is one we cannot see, not a
    deleted one), unless it has finished and still names its owner, which the garbage collector deletes it
    with."""
    pods_by_job: dict[str, list[PodInfo]] = {}
    for pod in pods:  # every pod of every pass: kept lean (a drained queue leaves 100,000 of them)
        key = pod.job_key
        if key is None:
            continue
        if key in jobs:
            found = pods_by_job.get(key)
            if found is None:
                pods_by_job[key] = [pod]
            else:
                found.append(pod)
        elif namespaces and pod.namespace not in namespaces:
            continue
        elif pod.terminal and pod.owner_uid and not pod.deleting:
            # finished, it holds no GPU, and the garbage collector removes it with its owner: deleting it too
            # doubled the writes of every job a TTL deleted (and lost the race to the collector, a 404, mostly)
            continue
        elif not pod.deleting or must_force(pod, nodes):
            plan.orphans.append(
                PodDelete(
                    pod.namespace, pod.name, pod.uid, must_force(pod, nodes), f"its ParallelJob {pod.job} is gone"
                )
            )
    return pods_by_job


def adopted_pods(
    jobs: Mapping[str, JobObject],
    groups: Mapping[str, list[PodInfo]],
    namespaces: Sequence[str],
    pod_groups: Mapping[str, NativeGroup],
    workloads: Mapping[str, WorkloadInfo],
    plan: Plan,
) -> dict[str, list[PodInfo]]:
    """The pods of each pod group whose ParallelJob adopts it; a group without one gets an adopting
    ParallelJob to create (``plan.adopt``). ``pod_groups``, ``workloads``: Kubernetes' own gang objects, by
    namespace/name, that a native group's adopting ParallelJob is declared from."""
    adopted: dict[str, list[PodInfo]] = {}
    for key, group_pods in groups.items():
        job = jobs.get(key)
        if job is not None and job.request is not None and not kind_of(job.request).renders_pods:
            stale = successors(job.owners, group_pods)
            if stale:
                plan.warnings.append(
                    f"pod group {key}: {len(stale)} pods belong to a replacement of the ParallelJob's owner;"
                    " they wait until the garbage collector removes it and a new ParallelJob adopts them"
                )
            stale_keys = {p.key for p in stale}
            adopted[key] = [p for p in group_pods if p.key not in stale_keys]
        elif job is not None:
            plan.warnings.append(f"pod group {key}: the ParallelJob of that name does not adopt it (no spec.podGroup)")
        elif all(p.deleting or p.terminal for p in group_pods):
            # Its owner is going away (the garbage collector may remove the ParallelJob before the pods
            # finish terminating): a new ParallelJob would have nothing to place and only join the queue.
            continue
        elif not namespaces or group_pods[0].namespace in namespaces:
            try:
                first = group_pods[0]
                native = pod_groups.get(key) if first.native else None
                manifest = adopting_manifest(first.namespace, first.group or "", group_pods, native, workloads)
                plan.adopt.append(manifest)
            except GroupDeclarationError as exc:
                plan.warnings.append(f"pod group {key} cannot be adopted: {exc}")
                if first.native:  # the PodGroup's own condition says it too: a log line is not where users look
                    plan.refused_groups[key] = str(exc)
    return adopted

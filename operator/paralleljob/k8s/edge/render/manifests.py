"""The objects the operator writes, as plain dicts: worker pods, the job's headless Service, Bindings and
Events. Pure functions of the job, its recorded placement and the time, so they are tested without a cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from paralleljob.k8s.edge.constants import (
    API_VERSION,
    CHECKPOINT_BOUNDARY_ANNOTATION,
    GPU_INDICES_ANNOTATION,
    GPU_RESOURCE,
    INCARNATION_ANNOTATION,
    JOB_LABEL,
    KIND,
    MANAGED_LABEL,
    MANAGED_VALUE,
    MASTER_PORT,
    MIG_SLICE_ANNOTATION,
    NODE_RANK_LABEL,
    REPLICA_LABEL,
    SCHEDULER_NAME,
    STAGE_LABEL,
    TARGET_NODE_ANNOTATION,
)
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.render.elasticenv import membership_configmap, rendezvous_service
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot


def owner_reference(job: JobObject) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


class PodSizing(Protocol):
    """What a job's sizing (``plan/kinds``: rigid or elastic) adds to each of its TP-group pods."""

    def pod_env(
        self, job: JobObject, request: JobRequest, record: PlacementRecord, slot: PodSlot
    ) -> Mapping[str, str | None]:
        """Variables over :func:`worker_env`'s (None: the variable is left out)."""
        ...

    def pod_labels(self, job: JobObject, slot: PodSlot) -> Mapping[str, str]:
        """Labels besides the job's, replica's, stage's and node rank's."""
        ...


# torchrun reads any of its flags from PET_<FLAG> (its argparse `env` action): with these a bare
# `torchrun train.py` joins the job's static rendezvous as the right node. Kubeflow's PyTorchJob uses the
# same names. The static backend is the only one that honours --node-rank; c10d sorts nodes its own way.
def worker_env(
    job: JobObject, record: PlacementRecord, slot: PodSlot, boundary: int, sized: Mapping[str, str | None]
) -> list[dict[str, str]]:
    """The environment every container of ``slot``'s pod gets, with its sizing's ``sized`` over it (None:
    left out); it overrides the template's own values."""
    tp, pp, dp = record.tp, record.pp, record.dp
    master = f"{record.master_slot().name}.{job.name}.{job.namespace}.svc"
    rank = record.node_rank(slot)
    values = {
        "PJ_JOB_NAME": job.name,
        "PJ_POD_NAME": slot.name,
        "PJ_TP_SIZE": tp,
        "PJ_PP_SIZE": pp,
        "PJ_DP_SIZE": dp,
        "PJ_PP_RANK": slot.stage,
        "PJ_DP_RANK": slot.replica,
        "PJ_RANK_ORDER": record.rank_order.value,
        "PJ_NPROC_PER_NODE": tp,
        "PJ_NNODES": pp * dp,
        "PJ_GPU_INDICES": ",".join(str(i) for i in slot.gpu_indices),
        "PJ_CHECKPOINT_BOUNDARY": boundary,
        "WORLD_SIZE": tp * pp * dp,
        "NODE_RANK": rank,
        "MASTER_ADDR": master,
        "MASTER_PORT": MASTER_PORT,
        "PET_NNODES": pp * dp,
        "PET_NPROC_PER_NODE": tp,
        "PET_NODE_RANK": rank,
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": MASTER_PORT,
        "PET_RDZV_BACKEND": "static",
    }
    for name, value in sized.items():
        if value is None:
            values.pop(name, None)
        else:
            values[name] = value
    return [{"name": name, "value": str(value)} for name, value in values.items()]


def worker_pod(
    job: JobObject, request: JobRequest, record: PlacementRecord, slot: PodSlot, boundary: int, sizing: PodSizing
) -> dict[str, Any]:
    """One worker: a TP group's ``tp`` GPUs on ``slot.node``, to be bound there by the operator; its
    ``sizing`` adds what a rigid or elastic job's worker needs."""
    labels = {
        JOB_LABEL: job.name,
        REPLICA_LABEL: str(slot.replica),
        STAGE_LABEL: str(slot.stage),
        NODE_RANK_LABEL: str(record.node_rank(slot)),
        MANAGED_LABEL: MANAGED_VALUE,
        **sizing.pod_labels(job, slot),
    }
    annotations = {
        GPU_INDICES_ANNOTATION: ",".join(str(i) for i in slot.gpu_indices),
        TARGET_NODE_ANNOTATION: slot.node,
        CHECKPOINT_BOUNDARY_ANNOTATION: str(boundary),
        INCARNATION_ANNOTATION: str(slot.incarnation),
        **({MIG_SLICE_ANNOTATION: str(slot.mig)} if slot.mig is not None else {}),
    }
    env = worker_env(job, record, slot, boundary, sizing.pod_env(job, request, record, slot))
    return pod_from_template(job, request, PodParts(slot.name, labels, annotations, env, record.tp))


@dataclass(frozen=True, slots=True)
class PodParts:
    """What one worker pod has of its own over the job's pod template."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    env: list[dict[str, str]]  # overrides the template's own values in every container
    gpus: int  # all on the first container


def pod_from_template(job: JobObject, request: JobRequest, parts: PodParts) -> dict[str, Any]:
    """Pod ``parts.name`` of ``job`` made from its pod template, the one way for a TP-group pod and a tray pod
    (``traymanifests``): the template's labels and annotations under ours, bound by the operator, ``env``
    overriding the template's own values in every container, and the pod's ``gpus`` GPUs all on the first
    container."""
    name, env, gpus = parts.name, parts.env, parts.gpus
    template: Mapping[str, Any] = request.template
    meta = template.get("metadata") or {}
    spec: dict[str, Any] = copy.deepcopy(dict(template["spec"]))
    spec.pop("nodeName", None)  # the operator binds; a template must not pick the node itself
    spec["schedulerName"] = SCHEDULER_NAME
    spec["hostname"] = name
    spec["subdomain"] = job.name
    spec.setdefault("restartPolicy", "Never")
    names = {item["name"] for item in env}
    for i, container in enumerate(spec.get("containers") or []):
        resources = container.setdefault("resources", {})
        for section in ("limits", "requests"):
            values = resources.setdefault(section, {}) or {}
            resources[section] = values
            if i == 0:
                values[GPU_RESOURCE] = str(gpus)
            else:
                values.pop(GPU_RESOURCE, None)  # the pod's GPUs are exactly its group's or tray's, on the first
        env_items = container.get("env") if isinstance(container.get("env"), list) else []
        kept = [item for item in env_items if isinstance(item, dict) and item.get("name") not in names]
        container["env"] = kept + env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": {**(meta.get("labels") or {}), **parts.labels},
            "annotations": {**(meta.get("annotations") or {}), **parts.annotations},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def headless_service(job: JobObject) -> dict[str, Any]:
    """Stable DNS names for the workers, ``<pod>.<job>.<namespace>.svc``; MASTER_ADDR names global rank 0's pod."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {JOB_LABEL: job.name, MANAGED_LABEL: MANAGED_VALUE},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: job.name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def binding(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    """A pods/binding body; the UID makes the API refuse it if the pod was replaced meanwhile."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def event(
    involved: Mapping[str, str],
    event_type: str,
    reason: str,
    message: str,
    now: str,
    name_suffix: str,
    instance: str,
) -> dict[str, Any]:
    """A core/v1 Event about ``involved`` ({apiVersion, kind, name, namespace?, uid?})."""
    namespace = involved.get("namespace") or "default"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{name_suffix}", "namespace": namespace},
        "involvedObject": dict(involved),
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": "paralleljob-operator"},
        "reportingComponent": "paralleljob.dev/operator",
        "reportingInstance": instance,
    }


def membership(job: JobObject, record: PlacementRecord) -> dict[str, Any]:
    """An elastic job's ``<job>-replicas`` ConfigMap (``elasticenv.membership_configmap``), owned by the job."""
    labels = {JOB_LABEL: job.name, MANAGED_LABEL: MANAGED_VALUE}
    return membership_configmap(job.name, job.namespace, owner_reference(job), labels, record)


def rendezvous(job: JobObject, record: PlacementRecord) -> dict[str, Any]:
    """An elastic job's ``<job>-rdzv`` Service pointed at its rendezvous host (``elasticenv.rendezvous_service``)."""
    labels = {JOB_LABEL: job.name, MANAGED_LABEL: MANAGED_VALUE}
    return rendezvous_service(job.name, job.namespace, owner_reference(job), labels, record)

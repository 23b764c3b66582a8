"""What an elastic job's workers are told, the ways trainers consume membership (docs/operator.md, "Elastic
jobs"):

- torchrun's elastic rendezvous: ``PET_NNODES=MIN:MAX`` counted in torchrun nodes (one pod, one TP group, is
  one node: ``minData*pp:maxData*pp``), the c10d backend on a stable name (the job's rendezvous Service,
  :func:`rendezvous_service`), the same ``PET_RDZV_ID`` everywhere, and ``PET_MAX_RESTARTS`` with
  headroom: torchrun does not count a new node joining as a restart, but every survivor of a shrink sees its
  collectives fail and restarts once, so each replica above min may be taken and given back
  ``SHRINKS_PER_REPLICA`` times on top of ``failurePolicy.maxRestarts``;
- per-step quorum trainers (TorchFT style): a stable ``REPLICA_GROUP_ID`` (the ``d`` of the pod's name, which a
  replica keeps for its life, unlike its position) and ``NUM_REPLICA_GROUPS`` (replicas when the pod started;
  the live list is in the job's status and ConfigMap);
- a ConfigMap ``<job>-replicas`` (:func:`membership_configmap`) listing the live replicas, their pods and ranks.

The rendezvous host is the stage-0 pod of the lowest live replica (the record's node rank 0), and the
endpoint is ``<job>-rdzv``, a headless Service (``publishNotReadyAddresses``) that selects exactly that pod
by its stable replica id and stage labels. It is rewritten whenever the placement changes, so when the host's
replica is dropped the Service is re-pointed at the new lowest live replica and the survivors' restarted
agents find the rendezvous again. ``is_host`` is left to torchrun: the c10d backend resolves the endpoint
and hosts the store on the pod whose own address it resolves to (``_matches_machine_hostname`` in torch
2.15 compares the name's addresses with the machine's), every other agent connects as a client; an
explicit ``is_host`` could not follow the host, since a pod's env never changes.
"""

from __future__ import annotations

import json
from typing import Any

from paralleljob.core.rankorder import global_ranks
from paralleljob.k8s.edge.constants import JOB_LABEL, MASTER_PORT, REPLICA_GROUP_LABEL, STAGE_LABEL
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot

SHRINKS_PER_REPLICA = 4


def replica_group_id(slot: PodSlot, job_name: str) -> int:
    """The stable replica id in a slot's pod name (``<job>-d<D>-p<P>``); its replica number otherwise."""
    tail = slot.name[len(job_name) + 2 :] if slot.name.startswith(f"{job_name}-d") else ""
    head = tail.partition("-p")[0]
    return int(head) if head.isdigit() else slot.replica


def elastic_env(
    job: JobObject, record: PlacementRecord, slot: PodSlot, min_data: int, max_data: int, max_restarts: int
) -> dict[str, str]:
    """What an elastic worker of ``min_data`` to ``max_data`` replicas is told over the static rendezvous's
    variables."""
    job_name, namespace, pp = job.name, job.namespace, record.pp
    endpoint = f"{rendezvous_name(job_name)}.{namespace}.svc:{MASTER_PORT}"
    return {
        "PET_NNODES": f"{min_data * pp}:{max_data * pp}",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": endpoint,
        "PET_RDZV_ID": f"{namespace}-{job_name}",
        "PET_MAX_RESTARTS": str(max_restarts + SHRINKS_PER_REPLICA * (max_data - min_data)),
        "REPLICA_GROUP_ID": str(replica_group_id(slot, job_name)),
        "NUM_REPLICA_GROUPS": str(record.dp),
        # torchrun shares its rendezvous TCPStore with the workers by default; a node that joins a running job
        # then waits forever for the master address, which the rank-0 agent writes only in its first round
        # (torch 2.15, seen in the by-hand run of docs/operator.md). Without sharing, every round writes it.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "PJ_MIN_DP_SIZE": str(min_data),
        "PJ_MAX_DP_SIZE": str(max_data),
    }


def rendezvous_name(job_name: str) -> str:
    return f"{job_name}-rdzv"


def rendezvous_host(record: PlacementRecord, job_name: str) -> tuple[int, int]:
    """(stable replica id, stage) of the rendezvous host: node rank 0's pod, in the lowest live replica."""
    host = record.master_slot()
    return replica_group_id(host, job_name), host.stage


def rendezvous_service(
    job_name: str, namespace: str, owner: dict[str, Any], labels: dict[str, str], record: PlacementRecord
) -> dict[str, Any]:
    """``<job>-rdzv``: a headless Service selecting only the rendezvous host's pod (its DNS name resolves to
    that pod's address, ready or not), rewritten with the placement so it follows the host."""
    rid, stage = rendezvous_host(record, job_name)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": rendezvous_name(job_name), "namespace": namespace, "labels": labels,
                     "ownerReferences": [owner]},
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: job_name, REPLICA_GROUP_LABEL: str(rid), STAGE_LABEL: str(stage)},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def membership_name(job_name: str) -> str:
    return f"{job_name}-replicas"


def membership_configmap(
    job_name: str, namespace: str, owner: dict[str, Any], labels: dict[str, str], record: PlacementRecord
) -> dict[str, Any]:
    """``<job>-replicas``: the live replicas with their pods and ranks, rewritten on every resize (a trainer
    may mount it; the kubelet refreshes a mounted ConfigMap within its sync period)."""
    groups: dict[int, dict[str, Any]] = {}
    for slot in record.slots:
        rid = replica_group_id(slot, job_name)
        entry = groups.setdefault(rid, {"replicaGroupId": rid, "replica": slot.replica, "pods": []})
        entry["pods"].append(
            {
                "name": slot.name,
                "stage": slot.stage,
                "node": slot.node,
                "nodeRank": record.node_rank(slot),
                "ranks": global_ranks(record.rank_order, slot.replica, slot.stage, record.tp, record.pp, record.dp),
            }
        )
    live = sorted(groups.values(), key=lambda g: int(g["replica"]))
    members = {"epoch": record.epoch, "numReplicaGroups": record.dp, "replicas": live}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": membership_name(job_name),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "data": {
            "replicas.json": json.dumps(members, indent=1, sort_keys=True),
            "numReplicaGroups": str(record.dp),
            "replicaGroupIds": ",".join(str(g["replicaGroupId"]) for g in live),
        },
    }

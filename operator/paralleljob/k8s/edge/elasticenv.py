"""What an elastic job's workers are told, the ways trainers consume membership (docs/operator.md, "Elastic
jobs"):

- torchrun's elastic rendezvous: ``PET_NNODES=MIN:MAX`` counted in torchrun nodes (one pod, one TP group, is
  one node: ``minData*pp:maxData*pp``), the c10d backend on a stable name (the rendezvous host's pod DNS name
  under the job's headless Service), the same ``PET_RDZV_ID`` everywhere, and ``PET_MAX_RESTARTS`` with
  headroom: torchrun does not count a new node joining as a restart, but every survivor of a shrink sees its
  collectives fail and restarts once, so each replica above min may be taken and given back
  ``SHRINKS_PER_REPLICA`` times on top of ``failurePolicy.maxRestarts``;
- per-step quorum trainers (TorchFT style): a stable ``REPLICA_GROUP_ID`` (the ``d`` of the pod's name, which a
  replica keeps for its life, unlike its position) and ``NUM_REPLICA_GROUPS`` (replicas when the pod started;
  the live list is in the job's status and ConfigMap);
- a ConfigMap ``<job>-replicas`` (:func:`membership_configmap`) listing the live replicas, their pods and ranks.

The rendezvous host is the pod that held node rank 0 when the pod was created (``is_host`` is set explicitly:
a Service name never matches a pod's own host name). If that replica is dropped, the survivors' rendezvous
endpoint is gone and they restart with the next placement's pods (a limitation noted in docs/operator.md).
"""

from __future__ import annotations

import json
from typing import Any

from paralleljob.core.rankorder import global_ranks
from paralleljob.k8s.edge.constants import MASTER_PORT
from paralleljob.k8s.edge.records import PlacementRecord, PodSlot

SHRINKS_PER_REPLICA = 4


def replica_group_id(slot: PodSlot, job_name: str) -> int:
    """The stable replica id in a slot's pod name (``<job>-d<D>-p<P>``); its replica number otherwise."""
    tail = slot.name[len(job_name) + 2 :] if slot.name.startswith(f"{job_name}-d") else ""
    head = tail.partition("-p")[0]
    return int(head) if head.isdigit() else slot.replica


def elastic_env(
    job_name: str,
    namespace: str,
    record: PlacementRecord,
    slot: PodSlot,
    min_data: int,
    max_data: int,
    max_restarts: int,
) -> dict[str, str]:
    pp = record.pp
    host = record.master_slot()
    endpoint = f"{host.name}.{job_name}.{namespace}.svc:{MASTER_PORT}"
    return {
        "PET_NNODES": f"{min_data * pp}:{max_data * pp}",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": endpoint,
        "PET_RDZV_ID": f"{namespace}-{job_name}",
        "PET_RDZV_CONF": f"is_host={'1' if slot.name == host.name else '0'}",
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

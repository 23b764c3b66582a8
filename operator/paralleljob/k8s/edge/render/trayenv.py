"""The environment of a whole-tray worker (core/nvl72/traypods): one torchrun per tray, ``GPUs-per-tray`` processes.

The same variables as a one-group worker (``manifests.worker_env``), counted in trays: torchrun's node count
is the number of trays and its node rank the tray's, so global rank = node rank x GPUs-per-tray + local
rank, which core/nvl72/traypods guarantees to be the placer's rank. A tray holding a slice of a TP group larger
than the tray says where its slice starts (``PJ_TP_RANK_OFFSET``: TP rank = offset + local rank).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.nvl72.traypods import TrayPod
from paralleljob.core.rankorder import RankOrder, coordinates

MASTER_PORT = 29500


@dataclass(frozen=True, slots=True)
class TrayJob:
    """The job every tray pod's environment names: where it runs, its TP x PP x DP and its rank order."""

    name: str
    namespace: str
    tp: int
    pp: int
    dp: int
    order: RankOrder


def tray_pod_name(job: str, pod: TrayPod) -> str:
    return f"{job}-tray{pod.node_rank}"


def tray_env(job: TrayJob, pods: Sequence[TrayPod], pod: TrayPod) -> list[dict[str, str]]:
    """Every container's environment in ``pod``; one TP group per tray (TP a multiple of the tray) only."""
    if len(pod.groups) != 1:
        raise ValueError(f"tray pod {pod.node_rank} holds {len(pod.groups)} TP groups; one per tray is supported")
    return tray_env_at(job, len(pods), pod.node_rank, len(pod.ranks), pod.clique)


def tray_env_at(job: TrayJob, nnodes: int, rank: int, nproc: int, clique: str) -> list[dict[str, str]]:
    """The same environment from a tray's node rank alone (a recorded tray): its ranks are the block
    ``rank x nproc ..``, so its TP group and the slice of it it holds follow from the rank order."""
    name, tp, pp, dp, order = job.name, job.tp, job.pp, job.dp, job.order
    if tp % nproc:
        raise ValueError(f"a tray of {nproc} ranks holds slices of several TP{tp} groups; one per tray is supported")
    replica, stage, offset = coordinates(order, rank * nproc, tp, pp, dp)
    master = f"{name}-tray0.{name}.{job.namespace}.svc"
    values = {
        "PJ_JOB_NAME": name,
        "PJ_POD_NAME": f"{name}-tray{rank}",
        "PJ_TP_SIZE": tp,
        "PJ_PP_SIZE": pp,
        "PJ_DP_SIZE": dp,
        "PJ_PP_RANK": stage,
        "PJ_DP_RANK": replica,
        "PJ_TP_RANK_OFFSET": offset,
        "PJ_RANK_ORDER": order.value,
        "PJ_NPROC_PER_NODE": nproc,
        "PJ_NNODES": nnodes,
        "PJ_NVLINK_CLIQUE": clique,
        "WORLD_SIZE": tp * pp * dp,
        "NODE_RANK": rank,
        "MASTER_ADDR": master,
        "MASTER_PORT": MASTER_PORT,
        "PET_NNODES": nnodes,
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": rank,
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": MASTER_PORT,
        "PET_RDZV_BACKEND": "static",
    }
    return [{"name": name, "value": str(value)} for name, value in values.items()]

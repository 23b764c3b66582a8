"""The environment of a whole-tray worker (core/traypods): one torchrun per tray, ``GPUs-per-tray`` processes.

The same variables as a one-group worker (``manifests.worker_env``), counted in trays: torchrun's node count
is the number of trays and its node rank the tray's, so global rank = node rank x GPUs-per-tray + local
rank, which core/traypods guarantees to be the placer's rank. A tray holding a slice of a TP group larger
than the tray says where its slice starts (``PJ_TP_RANK_OFFSET``: TP rank = offset + local rank).
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.rankorder import RankOrder
from paralleljob.core.traypods import TrayPod

MASTER_PORT = 29500


def tray_pod_name(job: str, pod: TrayPod) -> str:
    return f"{job}-tray{pod.node_rank}"


def tray_env(
    job: str, namespace: str, tp: int, pp: int, dp: int, order: RankOrder, pods: Sequence[TrayPod], pod: TrayPod
) -> list[dict[str, str]]:
    """Every container's environment in ``pod``; one TP group per tray (TP a multiple of the tray) only."""
    if len(pod.groups) != 1:
        raise ValueError(f"tray pod {pod.node_rank} holds {len(pod.groups)} TP groups; one per tray is supported")
    replica, stage = divmod(pod.groups[0], pp)
    master = f"{tray_pod_name(job, pods[0])}.{job}.{namespace}.svc"
    nproc = len(pod.ranks)
    values = {
        "PJ_JOB_NAME": job,
        "PJ_POD_NAME": tray_pod_name(job, pod),
        "PJ_TP_SIZE": tp,
        "PJ_PP_SIZE": pp,
        "PJ_DP_SIZE": dp,
        "PJ_PP_RANK": stage,
        "PJ_DP_RANK": replica,
        "PJ_TP_RANK_OFFSET": pod.tp_offset,
        "PJ_RANK_ORDER": order.value,
        "PJ_NPROC_PER_NODE": nproc,
        "PJ_NNODES": len(pods),
        "PJ_NVLINK_CLIQUE": pod.clique,
        "WORLD_SIZE": tp * pp * dp,
        "NODE_RANK": pod.node_rank,
        "MASTER_ADDR": master,
        "MASTER_PORT": MASTER_PORT,
        "PET_NNODES": len(pods),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": pod.node_rank,
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": MASTER_PORT,
        "PET_RDZV_BACKEND": "static",
    }
    return [{"name": name, "value": str(value)} for name, value in values.items()]

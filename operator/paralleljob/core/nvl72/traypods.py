"""Whole-tray workers: one pod per tray for a job whose TP groups span the trays of NVLink cliques.

A job placed over several trays of a clique uses NVLink across trays through one ComputeDomain per clique
(core/nvl72/nvlink), and a tray belongs to at most one ComputeDomain, so its pods take whole trays: one pod per
tray, running that tray's ranks. torchrun numbers a node's processes ``node_rank x nproc_per_node +
local_rank``, so a tray's ranks must be one aligned block of ``GPUs-per-tray`` consecutive global ranks;
the NVLink placer lays each clique's TP groups over its trays in node-rank order, which makes them so when
TP is a multiple of the tray (each tray holds a slice of one group) and when the groups on a tray are
consecutive in the rank order. :func:`tray_pods` derives the pods and says when that does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.errors import InvalidRequest
from paralleljob.core.rankorder import RankOrder, node_rank
from paralleljob.core.topology import Topology


@dataclass(frozen=True, slots=True)
class TrayPod:
    node: int  # the tray
    node_rank: int  # torchrun's --node-rank: first global rank // GPUs per pod
    gpus: tuple[int, ...]  # global GPU ids, local rank order
    ranks: tuple[int, ...]  # global ranks, consecutive
    groups: tuple[int, ...]  # TP groups (d * pp + p) with ranks here
    tp_offset: int  # TP rank of local rank 0 (a slice of a TP group larger than the tray)
    clique: str  # the NVLink clique, i.e. the ComputeDomain it joins


def tray_pods(
    topology: Topology, groups: Sequence[Sequence[int]], tp: int, pp: int, dp: int, order: RankOrder
) -> list[TrayPod]:
    """The job's tray pods in node-rank order; :class:`InvalidRequest` when a tray's ranks are not one block."""
    owner: dict[int, tuple[int, int]] = {}  # gpu -> (global rank, group)
    for d in range(dp):
        for p in range(pp):
            g = d * pp + p
            first = node_rank(order, d, p, pp, dp) * tp
            for k, gpu in enumerate(groups[g]):
                owner[gpu] = (first + k, g)
    per_tray: dict[int, list[int]] = {}
    for gpu in sorted(owner):
        per_tray.setdefault(topology.gpu_node[gpu], []).append(gpu)
    sizes = {len(gpus) for gpus in per_tray.values()}
    if len(sizes) > 1:
        raise InvalidRequest(f"the trays hold {sorted(sizes)} ranks each; one torchrun per tray needs one count")
    width = sizes.pop()
    pods = []
    for tray, gpus in per_tray.items():
        gpus.sort(key=lambda x: owner[x][0])
        ranks = [owner[x][0] for x in gpus]
        if ranks != list(range(ranks[0], ranks[0] + len(ranks))) or ranks[0] % width:
            raise InvalidRequest(
                f"tray {topology.node_names[tray]} holds ranks {ranks}: not one aligned block of {width}"
                " consecutive ranks, as one torchrun per tray needs"
            )
        level = topology.nvlink_level
        clique = topology.domain_names[level][topology.domain_of[level][tray]] if level else topology.node_names[tray]
        pods.append(
            TrayPod(
                node=tray,
                node_rank=ranks[0] // width,
                gpus=tuple(gpus),
                ranks=tuple(ranks),
                groups=tuple(dict.fromkeys(owner[x][1] for x in gpus)),
                tp_offset=ranks[0] % tp,
                clique=clique,
            )
        )
    pods.sort(key=lambda pod: pod.node_rank)
    return pods


def tray_pods_to_move(
    topology: Topology,
    shape: tuple[int, int, int],
    order: RankOrder,
    current: Sequence[Sequence[int]],
    best: Sequence[Sequence[int]],
) -> int:
    """Tray pods a move from ``current`` to ``best`` re-creates (``shape``: TP, PP, DP): those whose tray, GPUs
    or node rank change. Both shells count a tray job's move so (the operator's ``podsToMove``, the simulator's
    move-back price); a pod per TP group, as on HGX nodes, is not what a tray job runs."""
    tp, pp, dp = shape
    old = {(p.node, p.gpus, p.node_rank) for p in tray_pods(topology, current, tp, pp, dp, order)}
    return sum(1 for p in tray_pods(topology, best, tp, pp, dp, order) if (p.node, p.gpus, p.node_rank) not in old)

"""Whole-tray pods in the placement record: the status form of a job placed over the trays of NVLink cliques.

A job whose TP groups span trays (core/nvl72/nvlink) runs one pod per tray (core/nvl72/traypods), not one per TP group,
so its record lists trays: each with its node, GPUs in local-rank order, node rank and clique. The tray's
global ranks follow from those (node rank x GPUs per tray + local rank, what one torchrun per tray gives),
and so do the TP groups, so the record keeps nothing that could disagree with them. In the status such a
record says ``layout: trays``; a record without ``layout`` is the one-pod-per-TP-group form, unchanged, so
every record written before keeps its meaning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paralleljob.core.rankorder import RankOrder, coordinates, node_rank

TRAY_LAYOUT = "trays"


@dataclass(frozen=True, slots=True)
class TraySlot:
    """One whole-tray pod: ``len(gpu_indices)`` consecutive global ranks starting at ``node_rank x width``."""

    name: str
    node: str
    gpu_indices: tuple[int, ...]  # local rank order
    node_rank: int
    clique: str  # the NVLink clique, i.e. the ComputeDomain the pod joins
    incarnation: int = 0

    @property
    def ranks(self) -> list[int]:
        width = len(self.gpu_indices)
        return list(range(self.node_rank * width, (self.node_rank + 1) * width))

    def gpu_names(self) -> list[str]:
        return [f"{self.node}/{i}" for i in self.gpu_indices]


def tp_groups(trays: Sequence[TraySlot], tp: int, pp: int, dp: int, order: RankOrder) -> list[list[str]]:
    """GPU names of each TP group in group order d x pp + p, TP-rank order inside, from the trays' ranks."""
    by_rank: dict[int, str] = {}
    for tray in trays:
        for rank, name in zip(tray.ranks, tray.gpu_names(), strict=True):
            by_rank[rank] = name
    groups = []
    for d in range(dp):
        for p in range(pp):
            first = node_rank(order, d, p, pp, dp) * tp
            groups.append([by_rank[r] for r in range(first, first + tp)])
    return groups


def tray_groups(tray: TraySlot, tp: int, pp: int, dp: int, order: RankOrder) -> tuple[tuple[int, int], ...]:
    """(replica, stage) of each TP group the tray's ranks belong to, by the job's rank order, in rank order,
    each once: one for a tray inside a TP group (or a TP group wider than the tray), several when the tray
    holds whole TP groups. A tray pod records no replica or stage of its own; its ranks say them."""
    return tuple(dict.fromkeys(coordinates(order, r, tp, pp, dp)[:2] for r in tray.ranks))


def check_trays(trays: Sequence[TraySlot], tp: int, pp: int, dp: int) -> str | None:
    """Why ``trays`` cannot be the pods of TP x PP x DP (None when they can): one width, node ranks 0..n-1."""
    widths = {len(t.gpu_indices) for t in trays}
    if len(widths) != 1:
        return f"the trays hold {sorted(widths)} GPUs each; one torchrun per tray needs one count"
    width = widths.pop()
    if width == 0 or (tp * pp * dp) % width:
        return f"{tp * pp * dp} ranks do not fill whole trays of {width}"
    if sorted(t.node_rank for t in trays) != list(range(tp * pp * dp // width)):
        return f"the trays' node ranks must be 0..{tp * pp * dp // width - 1}, once each"
    return None


def trays_to_status(trays: Sequence[TraySlot]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "nodeRank": t.node_rank,
            "node": t.node,
            "gpuIndices": list(t.gpu_indices),
            "ranks": t.ranks,
            "clique": t.clique,
            "incarnation": t.incarnation,
        }
        for t in sorted(trays, key=lambda t: t.node_rank)
    ]


def trays_from_status(items: Sequence[Mapping[str, Any]]) -> tuple[TraySlot, ...]:
    """Raises KeyError/TypeError/ValueError on an unreadable entry (the caller names it a malformed record)."""
    return tuple(
        TraySlot(
            name=str(item["name"]),
            node=str(item["node"]),
            gpu_indices=tuple(int(i) for i in item["gpuIndices"]),
            node_rank=int(item["nodeRank"]),
            clique=str(item["clique"]),
            incarnation=int(item.get("incarnation", 0)),
        )
        for item in items
    )

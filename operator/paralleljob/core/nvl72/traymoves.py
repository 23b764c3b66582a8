"""The minimal repair of a tray job whose clique has no spare tray left: only the broken TP groups move.

A tray job (``core/nvl72/nvlink``) keeps each clique's groups when the clique's whole free trays replace its failed
ones. When a clique is short of spares the placer used to place the whole job afresh, re-creating most of its
pods (6 of 8 for a TP8 x DP4 job on 4-GPU trays, 4 of them healthy ones moved between trays of the same clique)
where moving the broken TP group to another clique's spares moves 2. Here the healthy groups stay on their
trays, a broken group is repaired inside its clique while that clique has spares, and otherwise moves whole to
another clique with enough whole free trays (a TP group never spans cliques). The groups of one move unit
(a group spanning trays, or the groups sharing one tray) move together and keep their GPU offsets on the
tray, so every rank on a healthy tray keeps its GPU.

This is what ``failurePolicy.strategy: minimal`` asks for; ``full`` places the job afresh (``core/failure/repair``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from paralleljob.core.cluster import Allocation
from paralleljob.core.nvl72.cliques import CliqueIndex
from paralleljob.core.topology import Topology


class TrayCounter(Protocol):
    """What this needs of the NVLink placer (``core/nvl72/nvlink.NVLinkPlacer``), which calls it."""

    topology: Topology
    index: CliqueIndex

    def whole_free_trays(self, i: int, memory_gb: float) -> list[int]: ...


def _units(topo_gpu_node: Sequence[int], groups: Sequence[Sequence[int]]) -> list[tuple[list[int], list[int]]]:
    """(trays, groups) that must move together: groups joined by a shared tray, in first-tray order."""
    parent = list(range(len(groups)))

    def find(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    owner: dict[int, int] = {}
    for g, group in enumerate(groups):
        for gpu in group:
            tray = topo_gpu_node[gpu]
            if tray in owner:
                parent[find(g)] = find(owner[tray])
            else:
                owner[tray] = g
    members: dict[int, list[int]] = {}
    for g in range(len(groups)):
        members.setdefault(find(g), []).append(g)
    out = []
    for gs in members.values():
        trays = list(dict.fromkeys(topo_gpu_node[x] for g in gs for x in groups[g]))
        out.append((trays, gs))
    return out


def move_broken_groups(
    placer: TrayCounter, memory_gb: float, previous: Allocation
) -> tuple[dict[int, int], list[str]] | None:
    """Old tray -> new tray for every tray of ``previous`` (itself for those that stay), and the moves in
    words; None when some broken unit fits no clique's whole free trays (then the job is placed afresh)."""
    topo, idx = placer.topology, placer.index
    old_trays = list(dict.fromkeys(topo.gpu_node[g] for g in previous.gpus))
    mine = set(old_trays)
    spares: dict[int, list[int]] = {}
    for c in range(len(idx.cliques)):
        whole = placer.whole_free_trays(c, memory_gb)
        spares[c] = [n for n in whole if n not in mine]
    still = {n for c in range(len(idx.cliques)) for n in placer.whole_free_trays(c, memory_gb) if n in mine}
    mapping = {t: t for t in old_trays}
    moves: list[str] = []
    used_cliques = {idx.clique_of(t) for t in old_trays}
    for trays, _groups in _units(topo.gpu_node, previous.groups):
        broken = [t for t in trays if t not in still]
        if not broken:
            continue
        home = idx.clique_of(trays[0])
        if home is None:
            return None
        size = idx.tray_gpus[home]
        if len(spares[home]) >= len(broken):  # repaired inside its clique: the healthy trays stay
            for t in broken:
                mapping[t] = spares[home].pop(0)
            continue
        # the whole unit leaves: to a clique of the same tray size, one the job already uses first (fewer
        # ComputeDomains and cheaper DP/PP traffic), then the roomiest
        candidates = [c for c in spares if c != home and idx.tray_gpus[c] == size and len(spares[c]) >= len(trays)]
        if not candidates:
            return None
        target = min(candidates, key=lambda c: (c not in used_cliques, -len(spares[c]), c))
        for t in trays:
            mapping[t] = spares[target].pop(0)
        # the unit's healthy trays are free again: a later unit of their clique may take them as spares
        spares[home].extend(t for t in trays if t in still)
        used_cliques.add(target)
        name = topo.domain_names[idx.level]
        moves.append(f"{len(trays)} tray(s) from clique {name[idx.cliques[home]]} to {name[idx.cliques[target]]}")
    return mapping, moves

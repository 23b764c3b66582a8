"""Re-pricing a running tray job: the fresh optimum, on the cliques and trays the job already holds when they
cost no more.

Re-optimisation asks the NVLink placer where a running job would go if placed now (``core/failure/repair``
``best_placement_now``), and moves it when that is cheaper enough for the pods it moves. The placer's answer
names cliques by its own tie-break: a TP8 x DP4 job split 3 + 1 over two empty cliques after a repair was
offered the clique holding its one moved group, re-creating all 8 tray pods where moving that group back
re-creates 2. Cliques are interchangeable for the price when the fabric above them treats them alike, so here
each clique of the answer is relabelled to the one where most of its groups run now, when that clique has
the room and the price does not rise; then every group whose clique is unchanged keeps its trays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.job import JobSpec
from paralleljob.core.nvl72.cliques import CliqueIndex
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import node_level_cost
from paralleljob.core.topology import Topology

COST_EPS = 1e-6  # ms, as the core placer's ties


def current_cliques(topology: Topology, index: CliqueIndex, current: Allocation) -> list[int] | None:
    """The clique (index into ``index.cliques``) each TP group of ``current`` runs in; None when one does not."""
    out = []
    for group in current.groups:
        clique = index.clique_of(topology.gpu_node[group[0]])
        if clique is None:
            return None
        out.append(clique)
    return out


def toward_current_cliques(
    state: ClusterState, unit_job: JobSpec, model: CostModel, layout: Sequence[int], now: Sequence[int]
) -> tuple[int, ...]:
    """``layout`` (a clique per TP group, on the clique topology ``state``) with each of its cliques swapped
    for the one where most of that clique's groups run ``now``, when both hold their new groups and the price
    does not rise. The cliques holding most groups are settled first, and a settled clique is not swapped
    again."""
    best = list(layout)
    if len(now) != len(best):
        return tuple(best)
    best_ms = node_level_cost(state.topology, unit_job, best, model).total_ms
    settled: set[int] = set()
    sizes = Counter(best)
    for clique in sorted(sizes, key=lambda c: (-sizes[c], c)):
        members = [g for g, c in enumerate(best) if c == clique]
        votes = Counter(now[g] for g in members)
        target = max(votes, key=lambda c: (votes[c], c == clique, -c))
        if target == clique or target in settled:
            settled.add(clique)
            continue
        others = [g for g, c in enumerate(best) if c == target]
        slots = state.node_slots
        mem = unit_job.memory_per_gpu_gb
        if slots(target, unit_job.tp, mem) < len(members) or slots(clique, unit_job.tp, mem) < len(others):
            settled.add(clique)
            continue
        trial = best.copy()
        for g in members:
            trial[g] = target
        for g in others:
            trial[g] = clique
        cost = node_level_cost(state.topology, unit_job, trial, model).total_ms
        if cost <= best_ms + COST_EPS:
            best, best_ms = trial, min(best_ms, cost)
            settled.add(target)
        else:
            settled.add(clique)
    return tuple(best)


def kept_trays(
    topology: Topology, index: CliqueIndex, tp: int, cliques: Sequence[int], current: Allocation
) -> dict[int, tuple[int, ...]]:
    """Group -> its GPUs now, for each group placed in the clique it runs in now and made of whole trays (TP a
    multiple of the tray: no other group shares them, so keeping them keeps every tray's ranks one block)."""
    if len(current.groups) != len(cliques):
        return {}
    kept: dict[int, tuple[int, ...]] = {}
    for g, group in enumerate(current.groups):
        clique = index.clique_of(topology.gpu_node[group[0]])
        if clique is None or clique != cliques[g] or tp % index.tray_gpus[clique]:
            continue
        kept[g] = tuple(group)
    return kept

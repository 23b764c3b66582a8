"""TP groups kept inside one domain of the level below the node (PCIe roots: ``Topology.sub_level``).

The placer chooses nodes at node level, where a TP group is priced at the node's bandwidth wherever its
GPUs sit. With a level below the node two refinements follow, both free at node level:

1. :func:`keep_groups_under_roots` moves a group that no domain of its node has room for to another node
   of its own leaf (or a node the job already uses) where one domain has room, when the node-level cost
   does not grow;
2. :func:`pick_group` then takes each group's GPUs inside its node: under one domain where one has room —
   the one with the fewest free GPUs that still fits, keeping emptier ones whole — else across as few
   domains as it can, the emptiest first.

Both read the same free counts per domain, so (1) predicts exactly what (2) will do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from paralleljob.core.cluster import ClusterState
from paralleljob.core.job import JobSpec
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import SingleMoveCost, node_level_cost
from paralleljob.core.topology import Topology

COST_EPS = 1e-6


def pick_group(topology: Topology, free: Sequence[int], tp: int) -> tuple[int, ...]:
    """``tp`` of a node's free GPUs ``free`` (ascending ids), as the module docstring says."""
    if topology.sub_level is None:
        return tuple(free[:tp])
    by_domain: dict[int, list[int]] = {}
    for gpu in free:
        by_domain.setdefault(topology.gpu_subdomain[gpu], []).append(gpu)
    fitting = [d for d, gpus in by_domain.items() if len(gpus) >= tp]
    if fitting:
        best = min(fitting, key=lambda d: (len(by_domain[d]), d))
        return tuple(by_domain[best][:tp])
    picked: list[int] = []
    for d in sorted(by_domain, key=lambda d: (-len(by_domain[d]), d)):
        picked.extend(by_domain[d][: tp - len(picked)])
        if len(picked) == tp:
            break
    return tuple(sorted(picked))


class RootRoom:
    """Free GPUs per domain below the node, of the nodes asked about, as groups are taken (a simulation
    of :func:`pick_group` over the state; the state itself is not changed)."""

    def __init__(self, state: ClusterState, tp: int, memory_gb: float) -> None:
        self.state, self.tp, self.memory_gb = state, tp, memory_gb
        self._free: dict[int, Counter[int]] = {}

    def free(self, node: int) -> Counter[int]:
        if node not in self._free:
            sub = self.state.topology.gpu_subdomain
            self._free[node] = Counter(sub[g] for g in self.state.eligible_gpus(node, self.memory_gb))
        return self._free[node]

    def fits(self, node: int) -> bool:
        return any(count >= self.tp for count in self.free(node).values())

    def take(self, node: int) -> None:
        free = self.free(node)
        fitting = [d for d, count in free.items() if count >= self.tp]
        if fitting:
            free[min(fitting, key=lambda d: (free[d], d))] -= self.tp
            return
        need = self.tp
        for d in sorted(free, key=lambda d: (-free[d], d)):
            taken = min(need, free[d])
            free[d] -= taken
            need -= taken
            if not need:
                return


def keep_groups_under_roots(
    state: ClusterState, job: JobSpec, model: CostModel, layout: Sequence[int], fanout: int = 16
) -> tuple[int, ...]:
    """``layout`` with groups that would span domains moved where one domain has room, at no extra cost."""
    topology = state.topology
    if topology.sub_level is None or job.tp == 1:
        return tuple(layout)
    tp, memory = job.tp, job.memory_per_gpu_gb
    room = RootRoom(state, tp, memory)
    groups_on = Counter(layout)
    pricing = SingleMoveCost(topology, job, layout, model)
    cost = node_level_cost(topology, job, pricing.layout, model).total_ms
    for g, node in enumerate(layout):
        if room.fits(node):
            room.take(node)
            continue
        best: tuple[float, int] | None = None
        for other in _candidates(state, job, node, set(pricing.layout), fanout):
            if other == node or groups_on[other] >= state.node_slots(other, tp, memory) or not room.fits(other):
                continue
            moved = pricing.with_move(g, other)
            if moved <= cost + COST_EPS and (best is None or (moved, other) < best):
                best = (moved, other)
        if best is None:
            room.take(node)
            continue
        pricing.apply(g, best[1])
        groups_on[node] -= 1
        groups_on[best[1]] += 1
        room.take(best[1])
    return tuple(pricing.layout)


def _candidates(state: ClusterState, job: JobSpec, node: int, used: set[int], fanout: int) -> list[int]:
    """Nodes the job already uses, then up to ``fanout`` nodes of ``node``'s lowest domain above the node
    with room for a group."""
    topology = state.topology
    out = sorted(used)
    if topology.top == 0:
        return out
    domain = topology.domain_of[1][node]
    found = 0
    for free in range(job.tp, topology.max_gpus_per_node + 1):
        for other in state.nodes_with_free(1, domain, free, job.memory_per_gpu_gb):
            if other not in used:
                out.append(other)
                found += 1
                if found >= fanout:
                    return out
    return out

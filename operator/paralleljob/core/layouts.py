"""Structured layouts: how the placer turns "DP groups inside level-L domains" into node assignments.

For a target DP level ``lam`` every pipeline stage's column (its ``dp`` TP groups, one per replica) must sit
inside one level-``lam`` domain, so the DP all-reduce never crosses a slower link. Stages are laid out as
contiguous runs over as few such domains as possible, themselves packed into as few parent domains as
possible (a path's boundary cost is the sum of the levels it crosses, so fewer domains per level is
cheaper). Inside each level-``lam`` domain the replicas' stage chains are packed whole into nodes where they
fit and split over consecutive nodes otherwise, so pipeline sends stay on NVLink or within a rack.

Domain choice is hierarchical best-fit: the lowest domain that can hold the request alone, and inside it
the child that fits most tightly, or, when no child fits, the largest children first. All counts come from
the cluster's histograms; nodes are read from per-domain buckets, never from a scan of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from paralleljob.core.cluster import ClusterState
from paralleljob.core.job import JobSpec


@dataclass(frozen=True, slots=True)
class Request:
    """What one placement needs, in the units the layout code counts in."""

    tp: int
    memory_gb: float

    def slots(self, free: int) -> int:
        return free // self.tp


Capacity = Callable[[int, int], int]  # (level, domain) -> units it can hold


class DomainPicker:
    """Chooses domains at a target level to hold ``need`` units, most local first."""

    def __init__(self, state: ClusterState, request: Request) -> None:
        self.state = state
        self.request = request
        self.topology = state.topology
        self.children = state.index.children

    # -- capacities ---------------------------------------------------------------------------------
    def node_units(self, free: int, unit: int) -> int:
        return self.request.slots(free) // unit

    def capacity(self, level: int, domain: int, target: int, unit: int) -> int:
        """Units (``unit`` TP groups each, all inside one level-``target`` domain) that fit in a domain."""
        if target == 0:
            row = self.state.free_histogram(level, domain, self.request.memory_gb)
            return sum(count * self.node_units(k, unit) for k, count in enumerate(row) if count)
        if level == target:
            return self.state.domain_slots(level, domain, self.request.tp, self.request.memory_gb) // unit
        return sum(self.capacity(level - 1, child, target, unit) for child in self.children[level][domain])

    # -- choice -------------------------------------------------------------------------------------
    def best_scope(self, target: int, need: int, unit: int) -> tuple[int, int] | None:
        """The lowest (level, domain) at or above ``target`` that can hold ``need`` units, tightest fit."""
        top = self.topology.top
        for level in range(max(target, 1), top + 1):
            best: tuple[int, int] | None = None
            for domain in range(self.topology.num_domains(level)):
                cap = self.capacity(level, domain, target, unit)
                if cap >= need and (best is None or cap < best[0]):
                    best = (cap, domain)
            if best is not None:
                return level, best[1]
        return None

    def pick(self, level: int, domain: int, target: int, need: int, unit: int) -> list[tuple[int, int]]:
        """Split ``need`` units over level-``target`` domains under (level, domain): [(domain, units)],
        in depth-first order so consecutive entries are as close as the tree allows."""
        if level == target:
            return [(domain, need)]
        if target == 0 and level == 1:
            return self._pick_nodes(domain, need, unit)
        caps = [(self.capacity(level - 1, c, target, unit), c) for c in self.children[level][domain]]
        caps = [(cap, c) for cap, c in caps if cap > 0]
        out: list[tuple[int, int]] = []
        remaining = need
        while remaining > 0 and caps:
            fitting = [(cap, c) for cap, c in caps if cap >= remaining]
            if fitting:
                cap, child = min(fitting)
                take = remaining
            else:
                cap, child = max(caps)
                take = cap
            caps.remove((cap, child))
            out.extend(self.pick(level - 1, child, target, take, unit))
            remaining -= take
        return out

    def _pick_nodes(self, domain: int, need: int, unit: int) -> list[tuple[int, int]]:
        """Nodes of a level-1 domain: the tightest single node if one fits, else the largest first.

        Nodes are drawn lazily from the domain's free-count buckets, so the cost is proportional to
        the nodes taken, not to the size of the domain."""
        width = self.topology.max_gpus_per_node + 1
        memory = self.request.memory_gb
        sources = {
            free: self.state.nodes_with_free(1, domain, free, memory)
            for free in range(width)
            if self.node_units(free, unit) > 0
        }
        heads: dict[int, int] = {}

        def head(free: int) -> int | None:
            if free not in heads:
                node = next(sources[free], None)
                if node is None:
                    return None
                heads[free] = node
            return heads[free]

        out: list[tuple[int, int]] = []
        remaining = need
        while remaining > 0:
            fits = [f for f in sorted(sources) if self.node_units(f, unit) >= remaining and head(f) is not None]
            if fits:
                chosen = fits[0]
            else:
                present = [f for f in sorted(sources, reverse=True) if head(f) is not None]
                if not present:
                    break
                chosen = present[0]
            node = heads.pop(chosen)
            take = min(self.node_units(chosen, unit), remaining)
            out.append((node, take))
            remaining -= take
        return out


def stage_runs(picker: DomainPicker, job: JobSpec, lam: int) -> list[tuple[int, int]] | None:
    """Level-``lam`` domains holding contiguous runs of stages, as [(domain, stages)], or None."""
    scope = picker.best_scope(lam, job.pp, job.dp)
    if scope is None:
        return None
    return picker.pick(scope[0], scope[1], lam, job.pp, job.dp)


def pack_chains(
    picker: DomainPicker, lam: int, domain: int, replicas: int, length: int
) -> list[list[int]] | None:
    """Nodes for ``replicas`` chains of ``length`` TP groups inside one level-``lam`` domain.

    Whole chains go to nodes that hold them; the rest run over consecutive nodes in depth-first order."""
    if lam == 0:
        return [[domain] * length for _ in range(replicas)]
    pieces = picker.pick(lam, domain, 0, replicas * length, 1)
    if sum(units for _, units in pieces) < replicas * length:
        return None
    chains: list[list[int]] = []
    leftovers: list[tuple[int, int]] = []
    for node, units in pieces:
        while units >= length and len(chains) < replicas:
            chains.append([node] * length)
            units -= length
        if units:
            leftovers.append((node, units))
    flat = [node for node, units in leftovers for _ in range(units)]
    while len(chains) < replicas:
        chains.append(flat[:length])
        flat = flat[length:]
    return chains


def layout_for_dp_level(picker: DomainPicker, job: JobSpec, lam: int) -> list[int] | None:
    """``group_nodes[d * pp + p]`` for a layout whose DP groups stay inside level-``lam`` domains."""
    runs = stage_runs(picker, job, lam)
    if runs is None:
        return None
    pp = job.pp
    group_nodes = [-1] * job.num_groups
    stage = 0
    for domain, count in runs:
        chains = pack_chains(picker, lam, domain, job.dp, count)
        if chains is None:
            return None
        for d, chain in enumerate(chains):
            for j, node in enumerate(chain):
                group_nodes[d * pp + stage + j] = node
        stage += count
    return group_nodes

"""Structured layouts: how the placer turns "DP groups inside level-L domains" into node assignments.

For a target DP level ``lam`` every pipeline stage's column (its ``dp`` TP groups, one per replica) must sit
inside one level-``lam`` domain, so the DP all-reduce never crosses a slower link. Stages are laid out as
contiguous runs over as few such domains as possible, themselves packed into as few parent domains as
possible (a path's boundary cost is the sum of the levels it crosses, so fewer domains per level is
cheaper). Inside each level-``lam`` domain the replicas' stage chains go whole into nodes that can hold a
whole chain, and the rest are split over as few nodes as the domain allows, so pipeline sends stay on
NVLink or within a rack.

Domain choice is hierarchical: the lowest domain that can hold the request alone, preferring the one that
needs the fewest sub-domains and then the tightest fit; inside it the child that fits most tightly, or,
when no child fits, the largest children first. Counts come from the cluster's histograms; nodes are read
lazily from per-domain buckets, never from a scan of the cluster.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass, field

from paralleljob.core.cluster import ClusterState
from paralleljob.core.job import JobSpec

SCOPES_PER_LEVEL = 3  # candidate domains tried at the lowest level that fits (cost decides among them)


@dataclass(frozen=True, slots=True)
class Request:
    """What one placement needs, in the units the layout code counts in."""

    tp: int
    memory_gb: float


@dataclass
class DomainPicker:
    """Chooses domains to hold units of TP groups; ``taken`` holds groups already promised on nodes."""

    state: ClusterState
    request: Request
    taken: dict[int, int] = field(default_factory=dict)
    # Capacities of the untouched state, shared by every picker of one placement.
    base_cache: dict[tuple[int, int, int, int], int] = field(default_factory=dict)
    mixed: bool = False  # a whole-first packing had to split some chains

    def __post_init__(self) -> None:
        self.topology = self.state.topology
        self.children = self.state.index.children
        self._unit_vectors: dict[int, list[int]] = {}
        # taken nodes per (level, domain), so a capacity question only looks at its own domain's nodes
        self._taken_in: dict[tuple[int, int], list[int]] = {}
        self._fit_cache: dict[tuple[int, int, int, int, int], int] = {}

    def take(self, node: int, groups: int) -> None:
        """Promise ``groups`` TP groups on ``node`` to the layout being built."""
        if node not in self.taken:
            for level in range(1, self.topology.top + 1):
                self._taken_in.setdefault((level, self.topology.domain_of[level][node]), []).append(node)
        self.taken[node] = self.taken.get(node, 0) + groups

    def _units_vector(self, unit: int) -> list[int]:
        """units(k) for every free count k, so a domain's capacity is one dot product."""
        vector = self._unit_vectors.get(unit)
        if vector is None:
            width = self.topology.max_gpus_per_node + 1
            vector = self._unit_vectors[unit] = [self._units_of_free(k, unit) for k in range(width)]
        return vector

    # -- capacities ---------------------------------------------------------------------------------
    def node_units(self, node: int, unit: int, free: int | None = None) -> int:
        if free is None:
            free = self.state.usable_free(node)
        return (free // self.request.tp - self.taken.get(node, 0)) // unit

    def _units_of_free(self, free: int, unit: int) -> int:
        return (free // self.request.tp) // unit

    def capacity(self, level: int, domain: int, target: int, unit: int) -> int:
        """Units (``unit`` TP groups each, all inside one level-``target`` domain) that fit in a domain."""
        if self.taken:
            return self._capacity(level, domain, target, unit)
        key = (level, domain, target, unit)
        cached = self.base_cache.get(key)
        if cached is None:
            cached = self.base_cache[key] = self._capacity(level, domain, target, unit)
        return cached

    def _capacity(self, level: int, domain: int, target: int, unit: int) -> int:
        memory = self.request.memory_gb
        if target == 0:
            if level == 0:
                return self.node_units(domain, unit) if self.state.memory_ok(domain, memory) else 0
            row = self.state.free_histogram(level, domain, memory)
            cap: int = sum(map(operator.mul, row, self._units_vector(unit)))
            for node in self._taken_in.get((level, domain), ()):
                if self.state.memory_ok(node, memory):
                    cap += self.node_units(node, unit) - self._units_of_free(self.state.usable_free(node), unit)
            return cap
        if level == target:
            groups = self.capacity(level, domain, 0, 1)
            return groups // unit
        return sum(self.capacity(level - 1, child, target, unit) for child in self.children[level][domain])

    # -- choice -------------------------------------------------------------------------------------
    def scopes(self, target: int, need: int, unit: int) -> list[tuple[int, int]]:
        """Candidate (level, domain) scopes at the lowest level where one domain holds ``need`` units."""
        top = self.topology.top
        for level in range(target, top + 1):
            if level == 0:
                node = self._tightest_node(need, unit)
                if node is not None:
                    return [(0, node)]
                continue
            # Stop scanning once enough domains need no more parts than the best conceivable, so a
            # request that fits almost anywhere does not look at every rack of a large cluster.
            ideal = self._ideal_parts(level, target, need, unit)
            fitting: list[tuple[int, int, int]] = []
            perfect = 0
            for domain in range(self.topology.num_domains(level)):
                cap = self.capacity(level, domain, target, unit)
                if cap < need:
                    continue
                parts = self._min_parts(level, domain, target, need, unit)
                fitting.append((parts, cap, domain))
                if parts <= ideal:
                    perfect += 1
                    if perfect >= SCOPES_PER_LEVEL:
                        break
            if fitting:
                return [(level, d) for _, _, d in sorted(fitting)[:SCOPES_PER_LEVEL]]
        return []

    def fit_level(self, level: int, domain: int, target: int, need: int, unit: int) -> int:
        """The lowest level of a domain inside (level, domain) that alone holds ``need`` units."""
        if level == target:
            return level
        if not self.taken:
            key = (level, domain, target, need, unit)
            cached = self._fit_cache.get(key)
            if cached is None:
                cached = self._fit_cache[key] = self._fit_level(level, domain, target, need, unit)
            return cached
        return self._fit_level(level, domain, target, need, unit)

    def _fit_level(self, level: int, domain: int, target: int, need: int, unit: int) -> int:
        if target == 0 and level == 1:
            return 0 if self._fits_one_node(domain, need, unit) else 1
        best = level
        for child in self.children[level][domain]:
            if self.capacity(level - 1, child, target, unit) >= need:
                best = min(best, self.fit_level(level - 1, child, target, need, unit))
                if best == target:
                    break
        return best

    def _fits_one_node(self, domain: int, need: int, unit: int) -> bool:
        if any(self.node_units(n, unit) >= need for n in self._taken_in.get((1, domain), ())):
            return True
        row = self.state.free_histogram(1, domain, self.request.memory_gb)
        vector = self._units_vector(unit)
        return any(count and vector[k] >= need for k, count in enumerate(row))

    def _ideal_parts(self, level: int, target: int, need: int, unit: int) -> int:
        if level == target:
            return 1
        if target == 0:
            top = self.topology.top
            row = self.state.free_histogram(top, 0, self.request.memory_gb) if top else [0]
            best = max((self._units_of_free(k, unit) for k, c in enumerate(row) if c), default=0)
            return -(-need // best) if best else need
        return 1

    def _min_parts(self, level: int, domain: int, target: int, need: int, unit: int) -> int:
        """How many level-``target`` domains the request needs inside this domain, at the fewest."""
        if level == target:
            return 1
        if target == 0:
            row = self.state.free_histogram(level, domain, self.request.memory_gb)
            sizes = [(self._units_of_free(k, unit), count) for k, count in enumerate(row) if count]
        else:
            sizes = [(self.capacity(level - 1, child, target, unit), 1) for child in self.children[level][domain]]
        parts, remaining = 0, need
        for size, count in sorted(sizes, reverse=True):
            if size <= 0:
                break
            used = min(count, -(-remaining // size))
            parts += used
            remaining -= used * size
            if remaining <= 0:
                break
        return parts

    def _tightest_node(self, need: int, unit: int) -> int | None:
        top = self.topology.top
        width = self.topology.max_gpus_per_node + 1
        for free in range(width):
            if self._units_of_free(free, unit) < need:
                continue
            for node in self._nodes(top, 0, free):
                if self.node_units(node, unit, free) >= need:
                    return node
        return None

    def _nodes(self, level: int, domain: int, free: int) -> Iterator[int]:
        if self.topology.top == 0:
            return self.state.nodes_with_free(0, 0, free, self.request.memory_gb)
        return self.state.nodes_with_free(level, domain, free, self.request.memory_gb)

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
                # The child where the remainder fits deepest (in one rack rather than a spine), then tightest.
                cap, child = min(
                    fitting, key=lambda cc: (self.fit_level(level - 1, cc[1], target, remaining, unit), cc)
                )
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

        Nodes come lazily from the domain's free-count buckets (plus nodes this layout already uses),
        so the cost is proportional to the nodes taken, not to the size of the domain."""
        width = self.topology.max_gpus_per_node + 1
        partial: dict[int, list[int]] = {}
        for node in self._taken_in.get((1, domain), ()) if self.topology.top else self.taken:
            units = self.node_units(node, unit)
            if units > 0 and self.state.memory_ok(node, self.request.memory_gb):
                partial.setdefault(units, []).append(node)
        sources = {f: self._nodes(1, domain, f) for f in range(width) if self._units_of_free(f, unit) > 0}
        heads: dict[int, int] = {}

        def head(units: int) -> int | None:
            if partial.get(units):
                return partial[units][0]
            for free, source in sources.items():
                if self._units_of_free(free, unit) != units:
                    continue
                if free not in heads:
                    node = next((n for n in source if n not in self.taken), None)
                    if node is None:
                        continue
                    heads[free] = node
                return heads[free]
            return None

        def take(units: int) -> int:
            if partial.get(units):
                return partial[units].pop(0)
            for free in list(heads):
                if self._units_of_free(free, unit) == units:
                    return heads.pop(free)
            raise AssertionError("take() without head()")

        sizes = sorted({self._units_of_free(f, unit) for f in sources} | set(partial))
        out: list[tuple[int, int]] = []
        remaining = need
        while remaining > 0:
            available = [u for u in sizes if head(u) is not None]
            if not available:
                break
            fits = [u for u in available if u >= remaining]
            units = fits[0] if fits else available[-1]
            node = take(units)
            used = min(units, remaining)
            out.append((node, used))
            remaining -= used
        return out


def stage_runs(picker: DomainPicker, job: JobSpec, lam: int) -> list[list[tuple[int, int]]]:
    """Ways to lay the stages over level-``lam`` domains: each a list of (domain, stages) runs."""
    return [picker.pick(level, domain, lam, job.pp, job.dp) for level, domain in picker.scopes(lam, job.pp, job.dp)]


def pack_chains(
    picker: DomainPicker, lam: int, domain: int, replicas: int, length: int, whole_first: bool = True
) -> list[list[int]] | None:
    """Nodes for ``replicas`` chains of ``length`` TP groups inside one level-``lam`` domain.

    ``whole_first``: whole chains go to nodes that hold them, the rest run over as few further nodes as
    possible; otherwise chains are laid back to back over the chosen nodes, which splits more chains but
    each into fewer pieces (which wins depends on the cost model, so the placer tries both). Nodes chosen
    are recorded in ``picker.taken``; ``picker.mixed`` says whether whole-first split some chains."""
    if lam == 0:
        picker.take(domain, replicas * length)
        return [[domain] * length for _ in range(replicas)]
    chains: list[list[int]] = []
    whole = min(replicas, picker.capacity(lam, domain, 0, length)) if whole_first else 0
    if whole:
        for node, count in picker.pick(lam, domain, 0, whole, length):
            picker.take(node, count * length)
            chains.extend([node] * length for _ in range(count))
    rest = (replicas - len(chains)) * length
    if rest:
        picker.mixed = picker.mixed or bool(chains)
        pieces = picker.pick(lam, domain, 0, rest, 1)
        if sum(units for _, units in pieces) < rest:
            return None
        flat = []
        for node, units in pieces:
            picker.take(node, units)
            flat.extend([node] * units)
        chains.extend(flat[i : i + length] for i in range(0, rest, length))
    return chains


CapacityCache = dict[tuple[int, int, int, int], int]


def layouts_for_dp_level(
    state: ClusterState, job: JobSpec, lam: int, cache: CapacityCache | None = None
) -> Iterator[list[int]]:
    """Layouts (``group_nodes[d * pp + p]``) whose DP groups stay inside level-``lam`` domains, built
    lazily so the placer can stop as soon as one meets its lower bound. ``cache`` holds capacities of the
    untouched state; one placement shares it across DP levels and bounds."""
    request = Request(job.tp, job.memory_per_gpu_gb)
    if cache is None:
        cache = {}
    for runs in stage_runs(DomainPicker(state, request, base_cache=cache), job, lam):
        picker = DomainPicker(state, request, base_cache=cache)
        layout = _fill(picker, job, lam, runs, whole_first=True)
        if layout is not None:
            yield layout
        if picker.mixed:
            layout = _fill(DomainPicker(state, request, base_cache=cache), job, lam, runs, whole_first=False)
            if layout is not None:
                yield layout


def _fill(
    picker: DomainPicker, job: JobSpec, lam: int, runs: list[tuple[int, int]], whole_first: bool
) -> list[int] | None:
    pp = job.pp
    group_nodes = [-1] * job.num_groups
    stage = 0
    for domain, count in runs:
        chains = pack_chains(picker, lam, domain, job.dp, count, whole_first)
        if chains is None:
            return None
        for d, chain in enumerate(chains):
            for j, node in enumerate(chain):
                group_nodes[d * pp + stage + j] = node
        stage += count
    return group_nodes if stage == pp else None

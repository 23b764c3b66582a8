"""One domain of a cluster as a cluster of its own, so a question about that domain costs its size.

A move plan (``core/moves``) asks, for each candidate domain, whether the waiting job fits inside it once
some jobs moved. Asked on the whole state, every node outside the domain has to be closed and reopened:
O(nodes) per try, whatever the domain's size. :func:`domain_view` copies the domain's nodes instead (their
GPUs, owners, health, cordons and the order in which the state lists them, so the placer breaks ties as it
would on the whole state) into a :class:`ClusterState` over the domain's own topology, with the levels,
bandwidths and names of the whole; :meth:`DomainView.placement_back` turns a placement made there into the
whole cluster's node and GPU numbers. The answer is the one the whole state with the rest closed gives
(``tests/property/test_move_plan_properties`` checks plans both ways).

The domain must be whole at the NVLink level (a clique or more, or nodes on HGX): a clique cut in two
would read as separate nodes to the NVLink placer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth, closed_nodes
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.topology import Topology

# A placer of the same kind and settings as another, over another state (a fresh one per question, so the
# placer a plan is made with keeps its own caches as they were)
PlacerFor = Callable[[ClusterState], PlacerLike]


@dataclass(frozen=True, slots=True)
class DomainTopology:
    """A domain's nodes as a topology of their own: ``nodes[i]`` is node i's number in the whole."""

    topology: Topology
    nodes: tuple[int, ...]
    level: int  # the level of the domain (its ancestors become single domains)

    def gpu_back(self, whole: Topology, gpu: int) -> int:
        node = self.topology.gpu_node[gpu]
        return whole.node_first_gpu[self.nodes[node]] + gpu - self.topology.node_first_gpu[node]


def domain_topology(whole: Topology, level: int, nodes: Sequence[int]) -> DomainTopology:
    """The topology of one level-``level`` domain's ``nodes``; domains keep their names and their order."""
    inside = tuple(sorted(nodes))
    domain_of: list[tuple[int, ...]] = [tuple(range(len(inside)))]
    names: list[tuple[str, ...]] = [tuple(whole.node_names[n] for n in inside)]
    for up in range(1, whole.top + 1):
        row = whole.domain_of[up]
        kept = sorted({row[n] for n in inside})
        renumber = {dom: i for i, dom in enumerate(kept)}
        domain_of.append(tuple(renumber[row[n]] for n in inside))
        names.append(tuple(whole.domain_names[up][d] for d in kept))
    first: list[int] = []
    gpu_node: list[int] = []
    subdomain: list[int] = []
    for i, n in enumerate(inside):
        first.append(len(gpu_node))
        gpu_node.extend([i] * whole.node_gpu_count[n])
        if whole.gpu_subdomain:
            subdomain.extend(whole.gpu_subdomain[g] for g in whole.node_gpus(n))
    topology = Topology(
        levels=whole.levels,
        node_names=names[0],
        node_gpu_count=tuple(whole.node_gpu_count[n] for n in inside),
        node_gpu_memory_gb=tuple(whole.node_gpu_memory_gb[n] for n in inside),
        node_first_gpu=tuple(first),
        domain_of=tuple(domain_of),
        domain_names=tuple(names),
        gpu_node=tuple(gpu_node),
        sub_level=whole.sub_level,
        gpu_subdomain=tuple(subdomain),
        nvlink_level=whole.nvlink_level,
    )
    return DomainTopology(topology, inside, level)


@dataclass(frozen=True, slots=True)
class DomainView:
    state: ClusterState  # the domain's nodes alone, as the whole state has them now
    domain: DomainTopology
    whole: Topology

    def placement_back(self, placement: Placement) -> Placement:
        """A placement made on the view, in the whole cluster's node and GPU numbers."""
        nodes, whole = self.domain.nodes, self.whole
        groups = tuple(tuple(self.domain.gpu_back(whole, g) for g in group) for group in placement.groups)
        return replace(placement, group_nodes=tuple(nodes[n] for n in placement.group_nodes), groups=groups)


def domain_view(state: ClusterState, domain: DomainTopology, closed: Sequence[int] = ()) -> DomainView:
    """``state`` on the domain's nodes alone, ``closed`` (whole-cluster numbers) taking no new work, as
    ``closed_nodes`` would close them on the whole state: O(the domain's GPUs)."""
    whole, topo, inside = state.topology, domain.topology, domain.nodes
    view = ClusterState(topo)
    owned: dict[str, list[int]] = {}
    unhealthy: list[tuple[int, GPUHealth]] = []
    for i, n in enumerate(inside):
        offset = topo.node_first_gpu[i] - whole.node_first_gpu[n]
        for g in whole.node_gpus(n):
            owner = state.owner[g]
            if owner is not None:
                owned.setdefault(owner, []).append(g + offset)
            if state.health[g] is not GPUHealth.HEALTHY:
                unhealthy.append((g + offset, state.health[g]))
    for holder, gpus in owned.items():
        allocation = state.allocations.get(holder)
        if allocation is None:
            view.assume(holder, gpus)
        else:
            view.allocate(Allocation(holder, (tuple(gpus),), allocation.memory_per_gpu_gb))
    for i, n in enumerate(inside):  # the memory as the whole has it, to the last rounding
        offset = topo.node_first_gpu[i] - whole.node_first_gpu[n]
        for g in whole.node_gpus(n):
            view.memory_used[g + offset] = state.memory_used[g]
    for gpu, health in unhealthy:
        view.set_health(gpu, health)
    for i, n in enumerate(inside):
        if not state.node_schedulable[n]:
            view.set_node_schedulable(i, False)
    _same_order(state, view, domain)
    position = {n: i for i, n in enumerate(inside)}
    for n in sorted(closed):
        at = position.get(n)
        if at is not None and view.node_schedulable[at]:
            view.set_node_schedulable(at, False)
    return DomainView(view, domain, whole)


def _same_order(state: ClusterState, view: ClusterState, domain: DomainTopology) -> None:
    """List the view's nodes in each bucket as the whole state lists them. Every change to a node moves it
    in all its domains' buckets at once, so the domain's own buckets give the order for every level."""
    whole, inside, topo = state.topology, domain.nodes, view.topology
    if domain.level == 0 or len(inside) == 1:
        return  # one node: nothing to order
    position = {n: i for i, n in enumerate(inside)}
    dom = whole.domain_of[domain.level][inside[0]]
    for free, bucket in enumerate(state.buckets[domain.level][dom][: topo.max_gpus_per_node + 1]):
        by_domain: dict[tuple[int, int], list[int]] = {}
        for n in bucket:
            i = position[n]
            for level in range(1, topo.top + 1):
                by_domain.setdefault((level, topo.domain_of[level][i]), []).append(i)
        for (level, dom_in_view), listed in by_domain.items():
            current = view.buckets[level][dom_in_view][free]
            if list(current) != listed and set(current) == set(listed):
                current.clear()
                current.update(dict.fromkeys(listed))


def domain_members(topology: Topology, level: int) -> tuple[tuple[int, ...], ...]:
    """The nodes of each level-``level`` domain, in node order; computed once per topology and level."""
    cache: dict[int, tuple[tuple[int, ...], ...]] = topology.__dict__.setdefault("_domain_members", {})
    if level not in cache:
        members: list[list[int]] = [[] for _ in range(topology.num_domains(level))]
        for node, dom in enumerate(topology.domain_of[level]):
            members[dom].append(node)
        cache[level] = tuple(tuple(nodes) for nodes in members)
    return cache[level]


def room_at_most(topology: Topology, level: int, excluded: dict[int, int]) -> list[int]:
    """Per level-``level`` domain: its GPUs less ``excluded`` (node -> GPUs no move can free there), from the
    topology's per-domain counts: O(domains + excluded nodes), however many nodes the domains hold."""
    room = list(topology.domain_gpu_counts(level))
    row = topology.domain_of[level]
    for node, gpus in excluded.items():
        room[row[node]] -= gpus
    return room


@dataclass
class InsideAsker:
    """Asks where a job goes inside one domain of ``state`` at a time (a move plan's tries). With a
    ``placer_for`` and ``narrow``, of the domain as a cluster of its own, O(its nodes), when it is whole at
    the NVLink level and not the whole cluster (its topology kept for the next question); else of the whole
    state with every other node closed, O(nodes)."""

    state: ClusterState
    placer: PlacerLike
    model: CostModel
    placer_for: PlacerFor | None = None
    narrow: bool = True
    views: dict[tuple[int, ...], DomainTopology] = field(default_factory=dict)

    def place(self, job: JobSpec, held: Collection[int], inside: Sequence[int], level: int) -> Placement | None:
        """``job`` on the level-``level`` domain's nodes ``inside`` alone, ``held`` closed; None: no room."""
        state, placer_for = self.state, self.placer_for
        topo = state.topology
        try:
            if placer_for is not None and self.narrow and topo.nvlink_level <= level < topo.top:
                domain = self.views.get(tuple(inside))
                if domain is None:
                    domain = self.views[tuple(inside)] = domain_topology(topo, level, inside)
                view = domain_view(state, domain, sorted(held))
                return view.placement_back(placer_for(view.state).place(job, self.model))
            asked = self.placer if placer_for is None else placer_for(state)
            within = set(inside)
            outside = (n for n in range(topo.num_nodes) if n not in within)
            with closed_nodes(state, sorted({*held, *outside})):
                return asked.place(job, self.model)
        except PlacementInfeasible:
            return None


def could_hold(
    state: ClusterState, need_gpus: int, held: Collection[int], freed: Sequence[Sequence[int]], inside: Sequence[int]
) -> bool:
    """Whether the nodes ``inside`` (less ``held``) could hold ``need_gpus`` GPUs once the GPUs ``freed``
    (per job) are given back: their free GPUs counted, O(the domain and those GPUs); no placement needs fewer."""
    within = {n for n in inside if n not in held and state.node_schedulable[n]}
    free = sum(state.usable_free(n) for n in within)
    gpu_node, health = state.topology.gpu_node, state.health
    for gpus in freed:
        free += sum(1 for g in gpus if gpu_node[g] in within and health[g] is GPUHealth.HEALTHY)
    return free >= need_gpus

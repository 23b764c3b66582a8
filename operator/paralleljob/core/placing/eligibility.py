"""Per-job node filters: which nodes one job may use, and how many of its TP groups each may hold.

The shell decides *why* a node is out for a job (a label its selector wants, a taint it does not tolerate,
a GPU product, CPU or memory its workers need); the core only sees a :class:`NodeFilter` and applies it the
same way on every path — admission, the queueing pass, preemption, repairs:

- ``never_fits`` is the permanent verdict: counted on the eligible nodes alone, at most ``ever_groups`` TP
  groups each (what the node's resources allow when it is empty), can the job fit an empty cluster?
- ``restricted`` applies the filter to a :class:`ClusterState` for the length of one decision: other nodes
  are closed, and on nodes where the job may place fewer groups than their free GPUs would take
  (``now_groups``: resources already used by other pods) the surplus GPUs are held back. Both are undone on
  exit: every owner and counter is as before (only the order inside a free-count bucket may change, as
  after any cordon and uncordon).
- :class:`FilteredPlacer` wraps any placer with both, per job id, so the core's queueing pass and the
  simulator's policies need no change to honour filters.
- ``domains`` (a PodGroup's ``schedulingConstraints.topology`` key, docs/pod-groups.md): the whole job must
  lie inside one of these node sets. Each domain with room for the job now is placed on alone and the
  cheapest answer wins, so the constraint is hard while the cost model still chooses inside the domain. A
  job no domain can take waits (non-permanent): labels, like taints, change with the fleet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.nvl72.cliques import nvlink_never_fits
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.topology import Topology

HOLD = "__held_back__"


@dataclass(frozen=True)
class NodeFilter:
    """The nodes one job may use. ``allowed`` None: every node. Node indices are the topology's."""

    allowed: frozenset[int] | None = None
    ever_groups: Mapping[int, int] = field(default_factory=dict)  # node -> most groups it could ever hold
    now_groups: Mapping[int, int] = field(default_factory=dict)  # node -> most groups it can take now
    why: tuple[str, ...] = ()  # why nodes are out, in words, for the refusal's reasons
    # Shared by filters with the same ``allowed`` and ``ever_groups`` (the shell passes one dict per
    # constraint set and pass), so the scan of the eligible nodes for a verdict runs once, not per job.
    memo: dict[tuple[int, float], tuple[int, float, int]] = field(default_factory=dict, compare=False, repr=False)
    domain_key: str = ""  # the node label whose one value the whole job must share ("" : no such constraint)
    domains: tuple[tuple[str, frozenset[int]], ...] = ()  # (label value, its nodes), for ``domain_key``

    def admits(self, node: int) -> bool:
        return self.allowed is None or node in self.allowed

    def summary(self, topology: Topology, tp: int, memory_gb: float) -> tuple[int, float, int]:
        """(GPUs of the largest eligible node, most GPU memory there, TP groups the eligible nodes hold empty)."""
        key = (tp, memory_gb)
        if key not in self.memo:
            nodes = range(topology.num_nodes) if self.allowed is None else self.allowed
            counts, memory = topology.node_gpu_count, topology.node_gpu_memory_gb
            self.memo[key] = (
                max((counts[n] for n in nodes), default=0),
                max((memory[n] for n in nodes), default=0.0),
                sum(min(counts[n] // tp, self.ever_groups.get(n, counts[n])) for n in nodes if memory[n] >= memory_gb),
            )
        return self.memo[key]


def never_fits(topology: Topology, job: JobSpec, node_filter: NodeFilter | None = None) -> list[str]:
    """Why ``job`` cannot fit even an empty cluster, using only the nodes the filter admits (empty: it can)."""
    t, mem = job.tp, job.memory_per_gpu_gb
    if topology.nvlink_level > 0:  # TP groups may span the trays of a clique (core/nvl72/nvlink)
        why = list(node_filter.why) if node_filter is not None else []
        reasons = nvlink_never_fits(topology, job, node_filter.allowed if node_filter is not None else None)
        return [*reasons, *why] if reasons else []
    if node_filter is None or (node_filter.allowed is None and not node_filter.ever_groups):
        why = list(node_filter.why) if node_filter is not None else []
        if t > topology.max_gpus_per_node:
            return [f"needs {t} GPUs in one node for each TP group; the largest node has {topology.max_gpus_per_node}"]
        if mem > topology.max_gpu_memory_gb:
            return [f"needs {mem:g} GB per GPU; the largest GPU has {topology.max_gpu_memory_gb:g} GB"]
        capacity = topology.group_capacity(t, mem)
        if capacity < job.num_groups:
            return [f"needs {job.num_groups} TP groups of {t} GPUs; even an empty cluster holds only {capacity}", *why]
        return []
    why = list(node_filter.why)
    if node_filter.allowed is not None and not node_filter.allowed:
        return ["no node satisfies this job's constraints", *why]
    largest, memory, capacity = node_filter.summary(topology, t, mem)
    if t > largest:
        return [f"needs {t} GPUs in one node for each TP group; the largest eligible node has {largest}", *why]
    if mem > memory:
        return [f"needs {mem:g} GB per GPU; the largest GPU on an eligible node has {memory:g} GB", *why]
    if capacity < job.num_groups:
        return [
            f"needs {job.num_groups} TP groups of {t} GPUs; the eligible nodes hold only {capacity} even when empty",
            *why,
        ]
    return []


@contextmanager
def restricted(state: ClusterState, job: JobSpec, node_filter: NodeFilter | None) -> Iterator[None]:
    """``state`` as ``job`` may use it, for the duration of the block; restored on exit."""
    if node_filter is None or (node_filter.allowed is None and not node_filter.now_groups):
        yield
        return
    closed = [n for n in range(state.topology.num_nodes) if state.node_schedulable[n] and not node_filter.admits(n)]
    for n in closed:
        state.set_node_schedulable(n, False)
    held: list[int] = []
    for n, limit in node_filter.now_groups.items():
        if not node_filter.admits(n) or not state.node_schedulable[n]:
            continue
        surplus = state.usable_free(n) - max(0, limit) * job.tp
        if surplus > 0:
            free = [g for g in state.topology.node_gpus(n) if state.eligible(g, 0.0)]
            held.extend(free[len(free) - surplus :])
    state.assume(HOLD, held)
    try:
        yield
    finally:
        state.forget(HOLD)
        for n in closed:
            state.set_node_schedulable(n, True)


def within_domain(node_filter: NodeFilter | None, in_use: Iterable[int]) -> NodeFilter | None:
    """For a repair: a filter with a topology key narrowed to the one domain of that key that holds most of
    ``in_use`` (the nodes the job runs on), so that moved TP groups stay beside the ones that did not move;
    the key's other domains are for placing the whole gang afresh (a requeue), not for half of it."""
    if node_filter is None or not node_filter.domain_key:
        return node_filter
    used = set(in_use)
    held, value, nodes = max(
        ((len(used & members), name, members) for name, members in node_filter.domains),
        key=lambda item: (item[0], item[1]),
        default=(0, "", frozenset[int]()),
    )
    if held == 0:
        nodes = frozenset()
        why = f"no node the job runs on has the label {node_filter.domain_key}"
    else:
        why = f"a repair stays inside {node_filter.domain_key}={value}, the domain of the job's other TP groups"
    allowed = nodes if node_filter.allowed is None else nodes & node_filter.allowed
    return replace(node_filter, allowed=allowed, why=(*node_filter.why, why), domain_key="", domains=())


class FilteredPlacer:
    """Any placer, with each job's node filter applied: a permanent refusal when the eligible nodes can never
    hold the job, else the placer's answer on the restricted state (with the filter's reasons on a "no")."""

    def __init__(
        self, placer: PlacerLike, state: ClusterState, filter_for: Callable[[JobSpec], NodeFilter | None]
    ) -> None:
        self.placer = placer
        self.state = state
        self.filter_for = filter_for

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        node_filter = self.filter_for(job)
        reasons = never_fits(self.state.topology, job, node_filter)
        if reasons:
            raise PlacementInfeasible(job.job_id, reasons, permanent=True)
        if node_filter is not None and node_filter.domain_key:
            return place_in_one_domain(self.placer, self.state, job, model, node_filter, previous)
        try:
            with restricted(self.state, job, node_filter):
                return self.placer.place(job, model, previous)
        except PlacementInfeasible as exc:
            if node_filter is None or not node_filter.why or exc.permanent:
                raise
            raise PlacementInfeasible(job.job_id, [*exc.reasons, *node_filter.why]) from None


MAX_DOMAINS_TRIED = 16  # a placement per domain: the roomiest this many, so a 400-rack cluster stays fast


def domain_room(state: ClusterState, job: JobSpec, nodes: frozenset[int]) -> int:
    """TP groups of ``job`` the domain's schedulable nodes have free GPUs for now."""
    return sum(state.usable_free(n) // job.tp for n in nodes)


def place_in_one_domain(
    placer: PlacerLike,
    state: ClusterState,
    job: JobSpec,
    model: CostModel,
    node_filter: NodeFilter,
    previous: Allocation | None = None,
) -> Placement:
    """The cheapest placement that keeps every TP group inside one domain of ``node_filter.domain_key``;
    domains are tried roomiest first (at most :data:`MAX_DOMAINS_TRIED`), each with the rest of the filter."""
    key = node_filter.domain_key
    with restricted(state, job, node_filter):
        rooms = sorted(
            ((domain_room(state, job, nodes), value, nodes) for value, nodes in node_filter.domains),
            key=lambda item: (-item[0], item[1]),
        )
    fitting = [(value, nodes) for room, value, nodes in rooms if room >= job.num_groups]
    if not fitting:
        best = f"the roomiest, {key}={rooms[0][1]}, has room for {rooms[0][0]}" if rooms else "no node has that label"
        raise PlacementInfeasible(
            job.job_id,
            [
                f"no single domain of topology key {key} has room for {job.num_groups} TP groups of {job.tp} GPUs"
                f" now; {best}",
                *node_filter.why,
            ],
        )
    best_placement: Placement | None = None
    best_value = ""
    reasons: list[str] = []
    for value, nodes in fitting[:MAX_DOMAINS_TRIED]:
        allowed = nodes if node_filter.allowed is None else nodes & node_filter.allowed
        inside = NodeFilter(allowed, node_filter.ever_groups, node_filter.now_groups, node_filter.why)
        try:
            with restricted(state, job, inside):
                placement = placer.place(job, model, previous)
        except PlacementInfeasible as exc:
            reasons.extend(exc.reasons[:1])
            continue
        if best_placement is None or placement.cost.total_ms < best_placement.cost.total_ms:
            best_placement, best_value = placement, value
    if best_placement is None:
        raise PlacementInfeasible(
            job.job_id, [f"no single domain of topology key {key} can hold the job now", *reasons[:2], *node_filter.why]
        )
    note = f"inside one domain of {key} ({key}={best_value}), the cheapest of {min(len(fitting), MAX_DOMAINS_TRIED)}"
    return replace(best_placement, reasons=(*best_placement.reasons, note))

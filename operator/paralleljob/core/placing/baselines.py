"""Baseline placement policies, to measure what topology-aware placement buys.

Both have the placer's shape, ``place(job, model, previous=None) -> Placement`` raising
:class:`PlacementInfeasible`, and never mutate the state, so a shell (the simulator) swaps them for the
core :class:`~paralleljob.core.placing.placer.Placer` by name.

* :class:`FirstFitPlacer` is topology-unaware, like a plain GPU-count scheduler: the first free GPUs in id
  order, cut into TP groups in that order. A TP group may straddle nodes; that is what it measures.
* :class:`BestFitDomainPlacer` is in the spirit of Kueue's topology-aware scheduling (TAS): the smallest
  domain that holds the whole job, TP groups packed onto nodes, no cost model. Inside the domain it takes
  the child that fits the remainder most tightly, else the largest children first; groups fill nodes in
  flat order ``d * pp + p``, with no thought for which groups talk to each other.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import rank_level_cost


def free_gpu_count(state: ClusterState, memory_gb: float) -> int:
    """Usable free GPUs with enough memory, from the top-level histogram (no scan of the GPUs)."""
    topology = state.topology
    row = state.free_histogram(topology.top, 0, memory_gb)
    return sum(k * count for k, count in enumerate(row) if count)


def tp_groups_across_nodes(state: ClusterState, groups: tuple[tuple[int, ...], ...]) -> int:
    """How many TP groups span more than one node (0 for every placement of the core placer)."""
    gpu_node = state.topology.gpu_node
    return sum(1 for group in groups if len({gpu_node[g] for g in group}) > 1)


def _placement(
    state: ClusterState, job: JobSpec, model: CostModel, groups: tuple[tuple[int, ...], ...], why: str
) -> Placement:
    gpu_node = state.topology.gpu_node
    group_nodes = tuple(gpu_node[group[0]] for group in groups)
    cost = rank_level_cost(state.topology, job, groups, model)
    split = tp_groups_across_nodes(state, groups)
    reasons = (why, f"{job.describe()}; cost {cost.total_ms:.3f} ms; {split} TP group(s) across nodes")
    # A baseline proves nothing, so its lower bound is the trivial one.
    return Placement(job.job_id, job.pp, job.dp, group_nodes, groups, cost, 0.0, False, reasons)


class FirstFitPlacer:
    """The first ``tp * pp * dp`` free GPUs in id order; TP groups are consecutive runs of them."""

    name = "first-fit"

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._capacity: dict[float, int] = {}  # GPUs with at least this much memory; the topology is fixed

    def capacity(self, memory_gb: float) -> int:
        """GPUs of the whole cluster with enough memory, computed once per memory size (not per waiting job)."""
        cached = self._capacity.get(memory_gb)
        if cached is None:
            topology = self.state.topology
            cached = self._capacity[memory_gb] = sum(
                count
                for count, m in zip(topology.node_gpu_count, topology.node_gpu_memory_gb, strict=True)
                if m >= memory_gb
            )
        return cached

    def check_feasible(self, job: JobSpec) -> None:
        state, mem = self.state, job.memory_per_gpu_gb
        capacity = self.capacity(mem)
        if capacity < job.num_gpus:
            raise PlacementInfeasible(
                job.job_id,
                [f"needs {job.num_gpus} GPUs with {mem:g} GB; even an empty cluster has only {capacity}"],
                permanent=True,
            )
        free = free_gpu_count(state, mem)
        if free < job.num_gpus:
            raise PlacementInfeasible(job.job_id, [f"needs {job.num_gpus} free GPUs; {free} are free now"])

    def _free_gpus_in_order(self, memory_gb: float) -> Iterator[int]:
        state = self.state
        # compress() skips nodes with no free GPU at C speed, so a full prefix of the cluster costs little.
        for node in itertools.compress(range(state.topology.num_nodes), state.node_free):
            if state.node_schedulable[node] and state.memory_ok(node, memory_gb):
                yield from state.eligible_gpus(node, memory_gb)

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        """``previous`` is accepted for interface parity and ignored: first-fit has no memory."""
        self.check_feasible(job)
        gpus = list(itertools.islice(self._free_gpus_in_order(job.memory_per_gpu_gb), job.num_gpus))
        if len(gpus) < job.num_gpus:  # the histogram said yes; only a corrupted state gets here
            raise PlacementInfeasible(job.job_id, [f"found {len(gpus)} of {job.num_gpus} free GPUs"])
        t = job.tp
        groups = tuple(tuple(gpus[i : i + t]) for i in range(0, len(gpus), t))
        return _placement(self.state, job, model, groups, "first free GPUs in id order (topology-unaware)")


class BestFitDomainPlacer:
    """Smallest domain that fits the whole job; TP groups packed onto nodes; no cost model."""

    name = "best-fit"

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        # Same constraints as ours (TP inside a node, memory), so the same verdicts and reasons.
        self._verdicts = Placer(state)

    def _slots(self, level: int, domain: int, job: JobSpec) -> int:
        return self.state.domain_slots(level, domain, job.tp, job.memory_per_gpu_gb)

    def _smallest_domain(self, job: JobSpec) -> tuple[int, int] | None:
        """(level, domain): the lowest level where one domain fits the job, the tightest such domain."""
        state, topology, need = self.state, self.state.topology, job.num_groups
        mem = job.memory_per_gpu_gb
        for free in range(need * job.tp, topology.max_gpus_per_node + 1):
            for node in state.nodes_with_free(topology.top, 0, free, mem) if topology.top else iter([0]):
                if state.node_slots(node, job.tp, mem) >= need:
                    return (0, node)
        for level in range(1, topology.top + 1):
            fitting = [
                (slots, domain)
                for domain in range(topology.num_domains(level))
                if (slots := self._slots(level, domain, job)) >= need
            ]
            if fitting:
                return (level, min(fitting)[1])
        return None

    def _fill(self, level: int, domain: int, need: int, job: JobSpec) -> list[tuple[int, int]]:
        """[(node, groups)] for ``need`` groups inside a domain: tightest child that fits, else largest."""
        state = self.state
        if level == 0:
            return [(domain, need)]
        if level == 1:
            return self._fill_nodes(domain, need, job)
        children = [(self._slots(level - 1, c, job), c) for c in state.index.children[level][domain]]
        children = [(slots, c) for slots, c in children if slots > 0]
        out: list[tuple[int, int]] = []
        while need > 0 and children:
            fitting = [sc for sc in children if sc[0] >= need]
            slots, child = min(fitting) if fitting else max(children, key=lambda sc: (sc[0], -sc[1]))
            children.remove((slots, child))
            take = min(slots, need)
            out.extend(self._fill(level - 1, child, take, job))
            need -= take
        return out

    def _fill_nodes(self, domain: int, need: int, job: JobSpec) -> list[tuple[int, int]]:
        state, topology, t, mem = self.state, self.state.topology, job.tp, job.memory_per_gpu_gb
        width = topology.max_gpus_per_node + 1
        taken: set[int] = set()
        out: list[tuple[int, int]] = []
        while need > 0:
            chosen = None
            # The tightest node that holds the rest, else the node with the most free GPUs.
            for free in itertools.chain(range(need * t, width), range(min(need * t, width) - 1, t - 1, -1)):
                chosen = next((n for n in state.nodes_with_free(1, domain, free, mem) if n not in taken), None)
                if chosen is not None:
                    break
            if chosen is None:
                break
            take = min(need, state.node_slots(chosen, t, mem))
            taken.add(chosen)
            out.append((chosen, take))
            need -= take
        return out

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        """``previous`` is accepted for interface parity and ignored: a re-placement starts afresh."""
        self._verdicts.check_feasible(job)
        scope = self._smallest_domain(job)
        if scope is None:
            raise PlacementInfeasible(job.job_id, ["no domain holds the whole job"])
        level, domain = scope
        pieces = self._fill(level, domain, job.num_groups, job)
        if sum(count for _, count in pieces) < job.num_groups:
            raise PlacementInfeasible(job.job_id, ["the chosen domain ran out of nodes"])
        groups: list[tuple[int, ...]] = []
        for node, count in pieces:
            gpus = self.state.eligible_gpus(node, job.memory_per_gpu_gb)
            groups.extend(tuple(gpus[i * job.tp : (i + 1) * job.tp]) for i in range(count))
        where = self.state.topology.levels[level].name
        return _placement(self.state, job, model, tuple(groups), f"smallest {where} that fits the whole job")

"""Evaluate a placement under a cost model, at rank level (any placement) or node level (the placer's).

Bandwidth in this topology is a function of the lowest shared level, and it never grows going up, so the
minimum over all pairs of a set of GPUs is the bandwidth of the set's lowest common level: one pass over
the set instead of all pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from paralleljob.core.job import JobSpec
from paralleljob.core.timing.cost import CostBreakdown, CostModel
from paralleljob.core.topology import Topology


def nodes_common_level(topology: Topology, nodes: Iterable[int]) -> int:
    """Lowest level containing every node of a non-empty collection (0 when all are one node)."""
    it = iter(nodes)
    first = next(it)
    level = 0
    for node in it:
        if node != first:
            level = max(level, topology.common_level(first, node))
    return level


def pipeline_ms(
    job: JobSpec, tp_groups: Sequence[Sequence[int]], model: CostModel, bandwidth: Callable[[int, int], float]
) -> float:
    """The slowest replica's pipeline time, each stage boundary at its slowest pair of same-TP-rank GPUs
    (``bandwidth``: the cost model's pair bandwidth, or the calibrated one of ``core/timing/stepcomm``)."""
    t, pp = job.tp, job.pp
    slowest = 0.0
    for d in range(job.dp):
        bws = []
        for p in range(pp - 1):
            a, b = tp_groups[d * pp + p], tp_groups[d * pp + p + 1]
            bws.append(min(bandwidth(a[k], b[k]) for k in range(t)))
        slowest = max(slowest, model.pp_ms(job, bws))
    return slowest


def min_pair_bandwidth(topology: Topology, gpus: Sequence[int]) -> float:
    """Minimum bandwidth over all pairs of distinct GPUs in ``gpus``; infinite when there is no pair."""
    if len(set(gpus)) < 2:
        return math.inf
    level = nodes_common_level(topology, (topology.gpu_node[g] for g in gpus))
    if level == 0 and topology.sub_level is not None and topology.same_subdomain(gpus):
        return topology.sub_level.bandwidth_gbps
    return topology.level_bandwidth(level)


def rank_level_cost(
    topology: Topology, job: JobSpec, tp_groups: Sequence[Sequence[int]], model: CostModel
) -> CostBreakdown:
    """The cost of any placement given as ``tp_groups[d * pp + p]`` = GPU ids in TP-rank order."""
    t, pp, dp = job.tp, job.pp, job.dp
    tp_bw = min((min_pair_bandwidth(topology, g) for g in tp_groups), default=math.inf)
    tp_ms = model.tp_ms(job, tp_bw) if t > 1 else 0.0
    pp_ms = pipeline_ms(job, tp_groups, model, topology.bandwidth_between) if pp > 1 else 0.0
    dp_ms = 0.0
    if dp > 1:
        dp_bw = math.inf
        for p in range(pp):
            for k in range(t):
                members = [tp_groups[d * pp + p][k] for d in range(dp)]
                dp_bw = min(dp_bw, min_pair_bandwidth(topology, members))
        dp_ms = model.dp_ms(job, dp_bw)
    return CostBreakdown(tp_ms, pp_ms, dp_ms, model.combine(tp_ms, pp_ms, dp_ms))


def node_level_cost(
    topology: Topology, job: JobSpec, group_nodes: Sequence[int], model: CostModel, tp_bw: float | None = None
) -> CostBreakdown:
    """The cost when each TP group sits inside one node: ``group_nodes[d * pp + p]`` is its node.

    Equal to :func:`rank_level_cost` for such placements, in O(groups x levels)."""
    pp, dp = job.pp, job.dp
    bw = topology.level_bandwidth
    if tp_bw is None:
        tp_bw = bw(0)
    tp_ms = model.tp_ms(job, tp_bw) if job.tp > 1 else 0.0
    pp_ms = 0.0
    if pp > 1:
        common = topology.common_level
        for d in range(dp):
            row = group_nodes[d * pp : (d + 1) * pp]
            pp_ms = max(pp_ms, model.pp_ms(job, [bw(common(row[p], row[p + 1])) for p in range(pp - 1)]))
    dp_ms = 0.0
    if dp > 1:
        level = max(nodes_common_level(topology, group_nodes[p::pp]) for p in range(pp))
        dp_ms = model.dp_ms(job, bw(level))
    return CostBreakdown(tp_ms, pp_ms, dp_ms, model.combine(tp_ms, pp_ms, dp_ms))


def placement_cost(
    topology: Topology, job: JobSpec, tp_groups: Sequence[Sequence[int]], model: CostModel
) -> CostBreakdown:
    """:func:`node_level_cost` when every TP group sits inside one node (the placer's placements),
    else, or with a level below the node, the general :func:`rank_level_cost`."""
    gpu_node = topology.gpu_node
    if topology.sub_level is not None:
        return rank_level_cost(topology, job, tp_groups, model)  # TP depends on the GPUs, not just the node
    nodes = []
    for group in tp_groups:
        node = gpu_node[group[0]]
        if any(gpu_node[g] != node for g in group) or len(set(group)) != len(group):
            return rank_level_cost(topology, job, tp_groups, model)
        nodes.append(node)
    return node_level_cost(topology, job, nodes, model)


class SingleMoveCost:
    """Prices "move TP group g to node n" for one layout in O(pp + dp) instead of O(pp x dp).

    Repairs try several spare nodes for each broken group; only the moved group's replica (its PP
    chain) and its stage column (its DP groups) change, so everything else is computed once."""

    def __init__(self, topology: Topology, job: JobSpec, layout: Sequence[int], model: CostModel) -> None:
        self.topology, self.job, self.model = topology, job, model
        self.layout = list(layout)
        pp, dp = job.pp, job.dp
        bw = topology.level_bandwidth
        self.tp_ms = model.tp_ms(job, bw(0)) if job.tp > 1 else 0.0
        self.replica_pp = [self._replica_pp(d, self.layout) for d in range(dp)] if pp > 1 else [0.0] * dp
        self.column_level = [nodes_common_level(topology, self.layout[p::pp]) for p in range(pp)]

    def _replica_pp(self, d: int, layout: Sequence[int]) -> float:
        pp, bw, common = self.job.pp, self.topology.level_bandwidth, self.topology.common_level
        row = layout[d * pp : (d + 1) * pp]
        return self.model.pp_ms(self.job, [bw(common(row[p], row[p + 1])) for p in range(pp - 1)])

    def with_move(self, group: int, node: int) -> float:
        job, pp = self.job, self.job.pp
        d, p = divmod(group, pp)
        trial = self.layout[d * pp : (d + 1) * pp]
        trial[p] = node
        pp_ms = 0.0
        if pp > 1:
            moved = self._replica_pp(0, trial)
            pp_ms = max([moved, *(v for i, v in enumerate(self.replica_pp) if i != d)])
        dp_ms = 0.0
        if job.dp > 1:
            column = self.layout[p::pp]
            column[d] = node
            level = max(
                [nodes_common_level(self.topology, column), *(v for i, v in enumerate(self.column_level) if i != p)]
            )
            dp_ms = self.model.dp_ms(job, self.topology.level_bandwidth(level))
        return self.model.combine(self.tp_ms, pp_ms, dp_ms)

    def apply(self, group: int, node: int) -> None:
        pp = self.job.pp
        d, p = divmod(group, pp)
        self.layout[group] = node
        if pp > 1:
            self.replica_pp[d] = self._replica_pp(d, self.layout)
        self.column_level[p] = nodes_common_level(self.topology, self.layout[p::pp])

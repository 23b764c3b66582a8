"""Keep a running job's pods where they are when a new placement of it only renumbers its data-parallel replicas.

The placer numbers the replicas of the placement it returns in its own order. For a job that already runs
(priced for a move back after a repair, a drain or a dear placement) that order is arbitrary: the step time depends on
which nodes hold each pipeline row and each stage column, not on which replica is called 0. A TP8 x DP2 job on
{node 1, node 3} whose best placement is {node 2, node 3} came back as (node 3, node 2), so both pods were
counted as moved and re-created where one would do. :func:`keep_replicas` renumbers the new placement's
replicas to match the current one as far as their TP groups coincide, and keeps the renumbering only if the
cost model prices it the same (checked, not assumed: a model that cared about replica order would say so).
Tray jobs on NVLink cliques are not renumbered here: ``NVLinkPlacer.place_near`` keeps their cliques and trays.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import placement_cost
from paralleljob.core.topology import Topology


def keep_replicas(
    current: Sequence[Sequence[int]], best: Placement, topology: Topology, job: JobSpec, model: CostModel
) -> Placement:
    """``best`` with its replicas renumbered so that as many TP groups as possible keep their GPUs from
    ``current`` (the job's groups now, in the same ``d * pp + p`` order); ``best`` itself when nothing is
    gained or the renumbered placement would be priced differently."""
    pp, dp = best.pp, best.dp
    if dp < 2 or len(current) != pp * dp:
        return best
    order = _matching_replicas(current, best.groups, pp, dp)
    if order == list(range(dp)):
        return best
    groups = tuple(best.groups[e * pp + p] for e in order for p in range(pp))
    group_nodes = tuple(best.group_nodes[e * pp + p] for e in order for p in range(pp))
    cost = placement_cost(topology, job, groups, model)
    if not math.isclose(cost.total_ms, best.cost.total_ms, rel_tol=1e-9, abs_tol=1e-9):
        return best
    return replace(best, groups=groups, group_nodes=group_nodes, cost=cost)


def _matching_replicas(current: Sequence[Sequence[int]], new: Sequence[Sequence[int]], pp: int, dp: int) -> list[int]:
    """For each current replica d, the new replica to call d: pairs sharing the most stages' GPUs first
    (ties by index, so the answer is deterministic); replicas left unmatched keep the new order."""
    where = {(index % pp, tuple(group)): index // pp for index, group in enumerate(new)}
    shared: Counter[tuple[int, int]] = Counter()
    for index, group in enumerate(current):
        match = where.get((index % pp, tuple(group)))
        if match is not None:
            shared[(index // pp, match)] += 1
    chosen = [-1] * dp
    taken: set[int] = set()
    for (d, e), _ in sorted(shared.items(), key=lambda item: (-item[1], item[0])):
        if chosen[d] < 0 and e not in taken:
            chosen[d] = e
            taken.add(e)
    unmatched = iter(e for e in range(dp) if e not in taken)
    return [e if e >= 0 else next(unmatched) for e in chosen]

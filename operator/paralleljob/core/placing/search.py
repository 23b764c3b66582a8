"""Exact branch-and-bound over node assignments, for requests small enough to search.

The structured layouts (``layouts``) are fast and usually optimal; when the placer cannot prove that with its
lower bound and the candidate nodes are few, this search settles it. It assigns TP groups replica by
replica, stage by stage, and prunes with a bound that is valid for every monotone cost model: finished
replicas count as they are, unfinished boundaries as if on NVLink, and the DP term at the widest level the
columns already span. Nodes that this job has not touched yet and that are interchangeable (same parent
domain, same free slots) are tried once, which removes most of the symmetric work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.job import JobSpec
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.topology import Topology

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class SearchResult:
    group_nodes: tuple[int, ...] | None  # None: nothing better than the incumbent exists
    cost_ms: float
    complete: bool  # False when the expansion budget ran out before the search finished


def exact_search(  # params: the question (job, model, cluster), the placer's two candidate arrays, two bounds
    topology: Topology,
    job: JobSpec,
    model: CostModel,
    nodes: Sequence[int],
    slots: Sequence[int],
    incumbent_ms: float,
    budget: int = 200_000,
) -> SearchResult:
    dp, pp = job.dp, job.pp
    bw = topology.level_bandwidth
    tp_ms = model.tp_ms(job, bw(0)) if job.tp > 1 else 0.0
    dp_cache = [model.dp_ms(job, bw(level)) if dp > 1 else 0.0 for level in range(topology.top + 1)]
    parent = topology.domain_of[1] if topology.top >= 1 else [0] * topology.num_nodes
    kinds = [(parent[n], s) for n, s in zip(nodes, slots, strict=True)]
    remaining = list(slots)
    used = [0] * len(nodes)
    assign = [-1] * (dp * pp)
    col_first = [-1] * pp
    best: list[object] = [None, incumbent_ms]
    expansions = [0]
    common = topology.common_level

    def bound(pp_done: float, partial: list[float], dp_level: int) -> float:
        # Unplaced boundaries at NVLink speed: no replica can do better (every model is monotone).
        pp_lb = pp_done
        if pp > 1:
            pp_lb = max(pp_lb, model.pp_ms(job, partial + [bw(0)] * (pp - 1 - len(partial))))
        return model.combine(tp_ms, pp_lb, dp_cache[dp_level])

    def visit(g: int, pp_done: float, partial: list[float], dp_level: int) -> bool:
        expansions[0] += 1
        if expansions[0] > budget:
            return False
        d, p = divmod(g, pp)
        if g == dp * pp:
            total = model.combine(tp_ms, pp_done, dp_cache[dp_level])
            if total < float(best[1]) - EPS:  # type: ignore[arg-type]
                best[0], best[1] = tuple(nodes[i] for i in assign), total
            return True
        prev = nodes[assign[g - 1]] if p > 0 else -1
        tried: set[tuple[int, int]] = set()
        order = sorted(range(len(nodes)), key=lambda i: (used[i] == 0, common(prev, nodes[i]) if p else 0, i))
        for i in order:
            if remaining[i] == 0:
                continue
            if used[i] == 0:
                if kinds[i] in tried:
                    continue
                tried.add(kinds[i])
            node = nodes[i]
            new_partial = [*partial, bw(common(prev, node))] if p > 0 else []
            level = dp_level
            first = col_first[p]
            if d > 0 and first != node:
                level = max(level, common(first, node))
            done = pp_done
            next_partial = new_partial
            if p == pp - 1:
                done = max(pp_done, model.pp_ms(job, new_partial)) if pp > 1 else pp_done
                next_partial = []
            if bound(done, next_partial, level) >= float(best[1]) - EPS:  # type: ignore[arg-type]
                continue
            remaining[i] -= 1
            used[i] += 1
            assign[g] = i
            if d == 0:
                col_first[p] = node
            ok = visit(g + 1, done, next_partial, level)
            remaining[i] += 1
            used[i] -= 1
            if not ok:
                return False
        return True

    complete = visit(0, 0.0, [], 0)
    return SearchResult(best[0], float(best[1]), complete)  # type: ignore[arg-type]

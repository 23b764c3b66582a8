"""An independent brute-force optimum for jobs on whole trays of NVLink cliques, used to check core/nvl72/nvlink.

It enumerates every way to give each TP group ``TP / tray`` whole free trays of one clique (or, for TP
below a tray, a clique whose whole free trays hold it), lays the GPUs out concretely and prices them pair
by pair with the topology's ``bandwidth_between`` and the cost model's per-term formulas. It shares nothing
with the placer but those two.
"""

from __future__ import annotations

import itertools
import math

from paralleljob.core import ClusterState, CostModel, JobSpec


def whole_free_trays(state: ClusterState, level: int) -> dict[int, list[int]]:
    """Per clique domain (with more than one node), its trays whose every GPU is free and schedulable."""
    topo = state.topology
    members: dict[int, list[int]] = {}
    for node in range(topo.num_nodes):
        members.setdefault(topo.domain_of[level][node], []).append(node)
    out = {}
    for dom, nodes in members.items():
        if len(nodes) < 2:
            continue
        out[dom] = [
            n for n in nodes if state.node_schedulable[n] and all(state.eligible(g, 0.0) for g in topo.node_gpus(n))
        ]
    return out


def gpu_cost(state: ClusterState, job: JobSpec, model: CostModel, groups: list[list[int]]) -> float:
    topo, pp, dp, t = state.topology, job.pp, job.dp, job.tp

    def bw(a: int, b: int) -> float:
        return topo.bandwidth_between(a, b)

    tp_bw = min((bw(a, b) for group in groups for a, b in itertools.combinations(group, 2)), default=math.inf)
    tp_ms = model.tp_ms(job, tp_bw) if t > 1 else 0.0
    pp_ms = 0.0
    if pp > 1:
        for d in range(dp):
            bws = [min(bw(groups[d * pp + p][k], groups[d * pp + p + 1][k]) for k in range(t)) for p in range(pp - 1)]
            pp_ms = max(pp_ms, model.pp_ms(job, bws))
    dp_ms = 0.0
    if dp > 1:
        worst = math.inf
        for p in range(pp):
            for k in range(t):
                members = [groups[d * pp + p][k] for d in range(dp)]
                worst = min(worst, min(bw(a, b) for a, b in itertools.combinations(members, 2)))
        dp_ms = model.dp_ms(job, worst)
    return model.combine(tp_ms, pp_ms, dp_ms)


def brute_force_cliques(
    state: ClusterState, job: JobSpec, model: CostModel, level: int, spares: int = 0
) -> float | None:
    """The cheapest whole-tray placement with every TP group inside one clique, at most (whole free trays -
    ``spares``) trays taken per clique; None when there is none."""
    topo = state.topology
    trays = whole_free_trays(state, level)
    usable = {dom: nodes[: max(0, len(nodes) - spares)] for dom, nodes in trays.items()}
    best = None
    cliques = sorted(usable)
    for assignment in itertools.product(cliques, repeat=job.num_groups):
        pools = {dom: [g for n in usable[dom] for g in topo.node_gpus(n)] for dom in cliques}
        taken = dict.fromkeys(cliques, 0)
        groups = []
        ok = True
        for dom in assignment:
            start = taken[dom]
            group = pools[dom][start : start + job.tp]
            if len(group) < job.tp:
                ok = False
                break
            groups.append(group)
            taken[dom] = start + job.tp
        if not ok:
            continue
        cost = gpu_cost(state, job, model, groups)
        if best is None or cost < best:
            best = cost
    return best

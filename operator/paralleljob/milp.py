"""An exact MILP for the seed cost model, solved by HiGHS (scipy), to measure the placer's quality.

Not used for placement: it is the yardstick for clusters too large for brute force (SPEC section 3,
"compare with an exact solver up to ~64 nodes"). Variables: ``x[g, n]`` puts TP group g on node n;
for every pipeline boundary and every domain, ``y`` says both ends share that domain; for every stage
column and domain, ``w`` says the whole column shares it. Boundary and DP costs are written as the top
level's cost minus a discount per level shared, which is exact because bandwidth never grows upward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from paralleljob.core import ClusterState, JobSpec, SeedCostModel, node_level_cost


@dataclass(frozen=True)
class MilpResult:
    cost_ms: float | None  # None: no solution within the time limit
    optimal: bool
    bound_ms: float | None  # the solver's dual bound
    seconds: float


def solve(state: ClusterState, job: JobSpec, time_limit_s: float = 60.0) -> MilpResult:
    import time

    topo, model = state.topology, SeedCostModel()
    bw = topo.level_bandwidth
    top = topo.top
    nodes = [n for n in range(topo.num_nodes) if state.node_slots(n, job.tp, job.memory_per_gpu_gb) > 0]
    pp, dp = job.pp, job.dp
    groups = pp * dp
    var: dict[tuple[object, ...], int] = {}

    def new(key: tuple[object, ...]) -> int:
        var[key] = len(var)
        return var[key]

    for g in range(groups):
        for n in nodes:
            new(("x", g, n))
    # domains below the top level, as node sets restricted to usable nodes
    domains: list[tuple[int, int, list[int]]] = []
    for level in range(top):
        by_domain: dict[int, list[int]] = {}
        for n in nodes:
            by_domain.setdefault(topo.domain_of[level][n], []).append(n)
        domains += [(level, dom, ns) for dom, ns in by_domain.items()]
    boundaries = [(d, p) for d in range(dp) for p in range(pp - 1)]
    for b in boundaries:
        for level, dom, _ in domains:
            new(("y", b, level, dom))
    if dp > 1:
        for p in range(pp):
            for level, dom, _ in domains:
                new(("w", p, level, dom))
        for level in range(top):
            new(("u", level))
    z = new(("z",))
    rows: list[tuple[dict[int, float], float, float]] = []
    for g in range(groups):
        rows.append(({var[("x", g, n)]: 1.0 for n in nodes}, 1.0, 1.0))
    for n in nodes:
        slots = state.node_slots(n, job.tp, job.memory_per_gpu_gb)
        rows.append(({var[("x", g, n)]: 1.0 for g in range(groups)}, 0.0, slots))
    pp_cost = [model.pp_ms(job, [bw(level)]) for level in range(top + 1)]
    for d, p in boundaries:
        for level, dom, members in domains:
            y = var[("y", (d, p), level, dom)]
            for g in (d * pp + p, d * pp + p + 1):
                link = {y: 1.0}
                for n in members:
                    link[var[("x", g, n)]] = -1.0
                rows.append((link, -np.inf, 0.0))
    for d in range(dp):
        # z >= sum over boundaries of cost(top) - discounts
        chain: dict[int, float] = {z: 1.0}
        constant = 0.0
        for p in range(pp - 1):
            constant += pp_cost[top]
            for level, dom, _ in domains:
                chain[var[("y", (d, p), level, dom)]] = pp_cost[level + 1] - pp_cost[level]
        rows.append((chain, constant, np.inf))
    c = np.zeros(len(var))
    c[z] = 1.0
    objective_constant = model.tp_ms(job, bw(0)) if job.tp > 1 else 0.0
    if dp > 1:
        dp_cost = [model.dp_ms(job, bw(level)) for level in range(top + 1)]
        objective_constant += dp_cost[top]
        for p in range(pp):
            for level, dom, members in domains:
                w = var[("w", p, level, dom)]
                for d in range(dp):
                    column = {w: 1.0}
                    for n in members:
                        column[var[("x", d * pp + p, n)]] = -1.0
                    rows.append((column, -np.inf, 0.0))
        for level in range(top):
            u = var[("u", level)]
            c[u] = -(dp_cost[level + 1] - dp_cost[level])
            for p in range(pp):
                whole = {u: 1.0}
                for lvl, dom, _ in domains:
                    if lvl == level:
                        whole[var[("w", p, lvl, dom)]] = -1.0
                rows.append((whole, -np.inf, 0.0))
    matrix = lil_matrix((len(rows), len(var)))
    lower, upper = np.empty(len(rows)), np.empty(len(rows))
    for i, (row, lo, hi) in enumerate(rows):
        for j, value in row.items():
            matrix[i, j] = value
        lower[i], upper[i] = lo, hi
    integrality = np.array([1 if key[0] == "x" else 0 for key in var])
    upper_bounds = np.array([np.inf if key[0] == "z" else 1.0 for key in var])
    start = time.perf_counter()
    result = milp(
        c,
        constraints=LinearConstraint(matrix.tocsr(), lower, upper),
        integrality=integrality,
        bounds=Bounds(np.zeros(len(var)), upper_bounds),
        options={"time_limit": time_limit_s, "disp": False},
    )
    seconds = time.perf_counter() - start
    if result.x is None:
        return MilpResult(None, False, None, seconds)
    bound = getattr(result, "mip_dual_bound", None)
    # Price the solver's assignment exactly rather than trusting its objective (HiGHS tolerances ~1e-6).
    chosen = result.x
    group_nodes = []
    for g in range(groups):
        weights = [(float(chosen[var[("x", g, n)]]), n) for n in nodes]
        group_nodes.append(max(weights)[1])
    return MilpResult(
        node_level_cost(topo, job, group_nodes, model).total_ms,
        result.status == 0,
        None if bound is None else float(bound) + objective_constant,
        seconds,
    )

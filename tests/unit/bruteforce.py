"""An independent brute-force optimum for small clusters, used to check the placer.

It enumerates every assignment of TP groups to nodes that respects free capacity and prices it with its
own straightforward reading of the seed formulas (all pairs, no shortcuts), sharing nothing with the
placer but the topology's bandwidth function and the cost model's per-term formulas.
"""

from __future__ import annotations

import itertools
import math

from paralleljob.core import ClusterState, CostModel, JobSpec


def pair_min(topology, nodes) -> float:
    best = math.inf
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            # distinct GPUs: on the same node they talk over NVLink
            bw = topology.level_bandwidth(0) if a == b else topology.bandwidth_between_nodes(a, b)
            best = min(best, bw)
    return best


def assignment_cost(topology, job: JobSpec, model: CostModel, nodes: tuple[int, ...]) -> float:
    pp, dp = job.pp, job.dp
    tp = model.tp_ms(job, topology.level_bandwidth(0)) if job.tp > 1 else 0.0
    pp_ms = 0.0
    for d in range(dp):
        bws = [
            topology.level_bandwidth(0)
            if nodes[d * pp + p] == nodes[d * pp + p + 1]
            else topology.bandwidth_between_nodes(nodes[d * pp + p], nodes[d * pp + p + 1])
            for p in range(pp - 1)
        ]
        if pp > 1:
            pp_ms = max(pp_ms, model.pp_ms(job, bws))
    dp_ms = 0.0
    if dp > 1:
        bw = min(pair_min(topology, [nodes[d * pp + p] for d in range(dp)]) for p in range(pp))
        dp_ms = model.dp_ms(job, bw)
    return model.combine(tp, pp_ms, dp_ms)


def brute_force_optimum(state: ClusterState, job: JobSpec, model: CostModel) -> float | None:
    topo = state.topology
    slots = {
        n: state.node_slots(n, job.tp, job.memory_per_gpu_gb)
        for n in range(topo.num_nodes)
        if state.node_slots(n, job.tp, job.memory_per_gpu_gb) > 0
    }
    best = None
    for nodes in itertools.product(sorted(slots), repeat=job.num_groups):
        used: dict[int, int] = {}
        ok = True
        for n in nodes:
            used[n] = used.get(n, 0) + 1
            if used[n] > slots[n]:
                ok = False
                break
        if not ok:
            continue
        cost = assignment_cost(topo, job, model, nodes)
        if best is None or cost < best:
            best = cost
    return best

"""A Volcano-style network-topology baseline: tier scoring over HyperNodes, then binpack, pod by pod.

Volcano's network-topology-aware scheduling (HyperNode CRDs, ``networkTopology.mode: hard``) keeps a gang
inside the lowest tier of HyperNodes that can hold it and, among HyperNodes of that tier, prefers the most
utilised one (binpack); inside it, each pod goes to the node the node-order plugins score best, here the
binpack plugin (the most allocated node that still fits). It knows tiers and pod counts, not which pods of
the gang talk to which, so it is the baseline that isolates what the rank-aware cost model adds over
"topology-aware, but rank-blind". This is a model of that behaviour written for the simulator, not
Volcano's code. Tiers are the topology's levels (node, then every switch level); one pod is one TP group.
"""

from __future__ import annotations

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.baselines import _placement
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import CostModel


class VolcanoTierPlacer:
    name = "volcano"

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._verdicts = Placer(state)  # same hard constraints (TP inside a node, memory) and reasons

    def _free(self, level: int, domain: int, memory_gb: float) -> int:
        row = self.state.free_histogram(level, domain, memory_gb)
        return sum(k * count for k, count in enumerate(row) if count)

    def _tier(self, job: JobSpec) -> tuple[int, int] | None:
        """(level, domain): the lowest tier with a domain that holds every pod; the most utilised of them."""
        state, topology, need, mem = self.state, self.state.topology, job.num_groups, job.memory_per_gpu_gb
        for level in range(1, topology.top + 1):
            fitting = [
                (self._free(level, d, mem), d)
                for d in range(topology.num_domains(level))
                if state.domain_slots(level, d, job.tp, mem) >= need
            ]
            if fitting:
                return level, min(fitting)[1]
        return None

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        """``previous`` is ignored: a re-placement starts afresh, as a gang restart does in Volcano."""
        self._verdicts.check_feasible(job)
        state, t, mem = self.state, job.tp, job.memory_per_gpu_gb
        tier = self._tier(job) if state.topology.top else (0, 0)
        if tier is None:
            raise PlacementInfeasible(job.job_id, ["no HyperNode of any tier holds the whole gang"])
        level, domain = tier
        groups: list[tuple[int, ...]] = []
        width = state.topology.max_gpus_per_node + 1
        # Binpack, pod by pod: the most allocated node that fits a pod takes it; it stays the most allocated
        # while it fits another, so nodes fill one at a time, fullest first.
        for free in range(t, width):
            for node in list(state.nodes_with_free(level, domain, free, mem)) if level else [domain]:
                gpus = state.eligible_gpus(node, mem)
                while len(groups) < job.num_groups and len(gpus) >= t:
                    groups.append(tuple(gpus[:t]))
                    gpus = gpus[t:]
                if len(groups) == job.num_groups:
                    where = state.topology.levels[level].name
                    return _placement(state, job, model, tuple(groups), f"lowest-tier {where}, binpacked pod by pod")
        raise PlacementInfeasible(job.job_id, ["the chosen HyperNode ran out of nodes"])

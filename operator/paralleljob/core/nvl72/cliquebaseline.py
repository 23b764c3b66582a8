"""The baseline on NVLink cliques: each TP group inside one clique, otherwise best-fit (no cost model).

This is what the peers' constraints give on GB200 NVL72 (Kueue's slice size, KAI's segments, a PodGroup
topology key on ``nvidia.com/gpu.clique``): the pods of a slice stay in one clique, nothing says which slices
should share one. A job that fits one tray goes to the tray with the fewest free GPUs that holds it; a larger
job takes whole free trays (one ComputeDomain per clique, like ours), its TP groups in flat order ``d * pp +
p``, each into the clique with the fewest whole free trays that still holds one group (tightest first), as
many groups there as fit. Spares (whole free trays per clique) are held back from new gangs as in
``core/nvl72/nvlink``; a repair (``previous``) re-places the whole job, spares included.
"""

from __future__ import annotations

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.nvl72.cliques import clique_index
from paralleljob.core.placing.placement import Placement
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import rank_level_cost


class CliqueBestFitPlacer:
    name = "clique-best-fit"

    def __init__(self, state: ClusterState, spares: int = 0) -> None:
        self.state = state
        self.spares = spares
        self.index = clique_index(state.topology)

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        state, idx, mem = self.state, self.index, job.memory_per_gpu_gb
        spares = 0 if previous is not None else self.spares
        if not idx.cliques:
            raise PlacementInfeasible(job.job_id, ["no NVLink clique in this cluster"], permanent=True)
        g = max(idx.tray_gpus)
        if job.tp > g and job.tp % g:
            raise PlacementInfeasible(
                job.job_id, [f"TP {job.tp} is not a multiple of the tray's {g} GPUs"], permanent=True
            )
        if job.num_gpus <= g:
            return self._one_tray(job, model, spares)
        whole = {
            i: sorted(state.nodes_with_free(idx.level, d, idx.tray_gpus[i], mem)) for i, d in enumerate(idx.cliques)
        }
        room = {i: max(0, len(trays) - spares) * idx.tray_gpus[i] // job.tp for i, trays in whole.items()}
        if sum(room.values()) < job.num_groups:
            raise PlacementInfeasible(
                job.job_id,
                [
                    f"needs {job.num_groups} TP groups of {job.tp} GPUs, each in one clique;"
                    f" the cliques hold {sum(room.values())}"
                ],
            )
        pools = {i: [x for n in trays for x in state.eligible_gpus(n, mem)] for i, trays in whole.items()}
        taken = dict.fromkeys(pools, 0)
        groups: list[tuple[int, ...]] = []
        current: int | None = None
        for _ in range(job.num_groups):
            if current is None or room[current] == 0:
                current = min((r, i) for i, r in room.items() if r > 0)[1]  # tightest clique that holds a group
            start = taken[current]
            groups.append(tuple(pools[current][start : start + job.tp]))
            taken[current] = start + job.tp
            room[current] -= 1
        return self._placement(job, model, tuple(groups), "each TP group in one clique, best-fit by clique")

    def _one_tray(self, job: JobSpec, model: CostModel, spares: int) -> Placement:
        state, idx, mem = self.state, self.index, job.memory_per_gpu_gb
        topo = state.topology
        held = set()
        if spares:
            for i, d in enumerate(idx.cliques):
                held.update(sorted(state.nodes_with_free(idx.level, d, idx.tray_gpus[i], mem))[-spares:])
        for free in range(job.num_gpus, topo.max_gpus_per_node + 1):
            for node in state.nodes_with_free(topo.top, 0, free, mem):
                if node in held:
                    continue
                gpus = state.eligible_gpus(node, mem)[: job.num_gpus]
                groups = tuple(tuple(gpus[k : k + job.tp]) for k in range(0, job.num_gpus, job.tp))
                return self._placement(job, model, groups, "one tray, best-fit")
        raise PlacementInfeasible(job.job_id, [f"no tray has {job.num_gpus} free GPUs"])

    def _placement(self, job: JobSpec, model: CostModel, groups: tuple[tuple[int, ...], ...], why: str) -> Placement:
        topo = self.state.topology
        cost = rank_level_cost(topo, job, groups, model)
        nodes = tuple(topo.gpu_node[group[0]] for group in groups)
        return Placement(job.job_id, job.pp, job.dp, nodes, groups, cost, 0.0, False, (why,))

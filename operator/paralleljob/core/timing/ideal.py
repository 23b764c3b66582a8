"""A job's ideal cost: the best placement the cluster allows when empty, priced, cached per shape.

Two shells need it. The simulator: a trace records how long a job ran, not where, so it assumes the job ran on
the placement the core placer picks on an empty copy of the simulated cluster, and measures every policy's
placements against that same reference (a policy only pays for communication it makes worse). Both shells: a
running job placed above its ideal cost is a move-back candidate (``core.reoptimize.reprice_now``), since
room may have come free since it was placed. Jobs the placer can never place (a TP group larger than any node,
which only first-fit accepts) are measured against every transfer at the fastest level's speed.

Two figures per shape: ``total_ms``, the cost model's price of that placement (what the placer minimises
and what a repair or move-back is judged against), and ``comm_ms``, the time its communication takes under
the calibrated collective model (``core.timing.stepcomm``), which the simulator's step-time model divides by.
Built per topology and cost model; the caller keeps one while its topology stands.
"""

from __future__ import annotations

from paralleljob.core.cluster import ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.stepcomm import StepComm, one_domain_comm
from paralleljob.core.topology import Topology


class IdealCosts:
    """The ideal placement's figures per job shape on one topology under one cost model, computed once each."""

    def __init__(self, topology: Topology, model: CostModel) -> None:
        self.topology = topology
        self.model = model
        self.timing = StepComm(topology)
        self._placer: Placer | None = None  # built on first use: an empty 100k-GPU state is not free
        self._cache: dict[tuple[int, int, int, float, object], tuple[float, float]] = {}

    def total_ms(self, job: JobSpec) -> float:
        """The cost model's price of the ideal placement."""
        return self._get(job)[0]

    def comm_ms(self, job: JobSpec) -> float:
        """The calibrated time of the ideal placement's communication per step."""
        return self._get(job)[1]

    def _get(self, job: JobSpec) -> tuple[float, float]:
        key = (job.tp, job.pp, job.dp, job.memory_per_gpu_gb, job.model)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._compute(job)
        return cached

    def _compute(self, job: JobSpec) -> tuple[float, float]:
        if self._placer is None:
            self._placer = Placer(ClusterState(self.topology))
        try:
            placement = self._placer.place(job, self.model)
        except PlacementInfeasible:
            fastest = self.topology.level_bandwidth(0)
            model = self.model
            tp = model.tp_ms(job, fastest) if job.tp > 1 else 0.0
            pp = model.pp_ms(job, [fastest] * (job.pp - 1)) if job.pp > 1 else 0.0
            dp = model.dp_ms(job, fastest) if job.dp > 1 else 0.0
            return model.combine(tp, pp, dp), one_domain_comm(job, model).total_ms
        return placement.cost.total_ms, self.timing.step(job, placement.groups, self.model).total_ms

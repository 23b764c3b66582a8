"""The pure placement core: topology, cluster state, cost models, placer, recovery, lifecycle.

Synchronous and free of I/O: no Kubernetes client, no prometheus, no asyncio (import-linter
enforces it). Shells (the operator, the simulator, the seed facade) feed it values and execute the
decisions it returns.

Its rooms, by what they decide: ``placing`` (one gang onto GPUs), ``timing`` (what a placement costs),
``admit`` (who starts now, who waits and why), ``failure`` (the failure policy and repairs), ``nvl72``
(cliques of trays larger than a node) and ``slices`` (MIG and MPS sharing); the cluster, the job, the
topology and the lifecycle table they all read sit at the top.
"""

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth, GPUState
from paralleljob.core.errors import IllegalTransition, InvalidRequest, ParallelJobError, PlacementInfeasible
from paralleljob.core.failure.checkpoint import checkpointable_boundary, young_daly_interval_seconds
from paralleljob.core.failure.recovery import RecoveryOutcome, RecoveryStrategy, recover
from paralleljob.core.job import JobSpec, ModelShape
from paralleljob.core.lifecycle import Event, Phase, transition
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import Placer, PlacerConfig
from paralleljob.core.timing.cost import (
    COST_MODELS,
    CostBreakdown,
    CostModel,
    MegatronCostModel,
    SeedCostModel,
    cost_model,
)
from paralleljob.core.timing.evaluate import node_level_cost, rank_level_cost
from paralleljob.core.topology import Level, NodeSpec, Topology

__all__ = [
    "COST_MODELS",
    "Allocation",
    "ClusterState",
    "CostBreakdown",
    "CostModel",
    "Event",
    "GPUHealth",
    "GPUState",
    "IllegalTransition",
    "InvalidRequest",
    "JobSpec",
    "Level",
    "MegatronCostModel",
    "ModelShape",
    "NodeSpec",
    "ParallelJobError",
    "Phase",
    "Placement",
    "PlacementInfeasible",
    "Placer",
    "PlacerConfig",
    "RecoveryOutcome",
    "RecoveryStrategy",
    "SeedCostModel",
    "Topology",
    "checkpointable_boundary",
    "cost_model",
    "node_level_cost",
    "rank_level_cost",
    "recover",
    "transition",
    "young_daly_interval_seconds",
]

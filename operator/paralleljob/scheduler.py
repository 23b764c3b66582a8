"""The seed-compatible facade: ``GPU``, ``ClusterTopology``, ``Job`` and ``GPUClusterScheduler``.

Field names, defaults and method signatures are exactly the seed's (SPEC section 2); the work is done by
``paralleljob.core``. Bad input raises ``ValueError`` (``InvalidRequest``) before anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paralleljob.core import (
    Allocation,
    ClusterState,
    GPUHealth,
    InvalidRequest,
    JobSpec,
    ModelShape,
    Placement,
    PlacementInfeasible,
    Placer,
    RecoveryStrategy,
    Topology,
    checkpointable_boundary,
    rank_level_cost,
    recover,
)
from paralleljob.core import (
    cost_model as cost_model_named,
)


@dataclass
class GPU:
    gpu_id: int
    node_id: int
    memory_gb: int = 80
    memory_used_gb: float = 0.0
    is_healthy: bool = True


@dataclass
class ClusterTopology:
    num_nodes: int
    gpus_per_node: int = 8
    intra_node_bw_gbps: float = 600.0
    inter_node_bw_gbps: float = 50.0
    # Optional levels between node and cluster, bottom-up: (name, nodes per domain, GB/s per GPU).
    levels: Sequence[tuple[str, int, float]] = ()
    gpu_memory_gb: int = 80

    def build(self) -> Topology:
        return Topology.uniform(
            self.num_nodes,
            self.gpus_per_node,
            intra_node_bw_gbps=self.intra_node_bw_gbps,
            levels=tuple(self.levels),
            inter_node_bw_gbps=self.inter_node_bw_gbps,
            gpu_memory_gb=self.gpu_memory_gb,
        )


@dataclass
class Job:
    job_id: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    memory_per_gpu_gb: float
    hidden_dim: int = 4096
    seq_len: int = 2048
    micro_batch_size: int = 1
    num_params_billions: float = 70.0
    dtype_bytes: int = 2
    num_layers: int | None = None
    global_batch_size: int | None = None
    stage_activation_sizes: Sequence[float] | None = field(default=None, repr=False)

    def spec(self) -> JobSpec:
        model = ModelShape(
            self.hidden_dim,
            self.seq_len,
            self.micro_batch_size,
            self.num_params_billions,
            self.dtype_bytes,
            self.num_layers,
            self.global_batch_size,
        )
        return JobSpec(
            self.job_id,
            self.tensor_parallel_size,
            self.pipeline_parallel_size,
            self.data_parallel_size,
            self.memory_per_gpu_gb,
            model,
        )


class GPUClusterScheduler:
    """Gang placement of TP x PP x DP jobs on a cluster, minimising the step's communication time."""

    def __init__(
        self, topology: ClusterTopology, cost_model: str = "seed", recovery: str = "full"
    ) -> None:
        self.topology = topology
        self._topology = topology.build()
        self._state = ClusterState(self._topology)
        self._placer = Placer(self._state)
        self._model = cost_model_named(cost_model)
        self.recovery = RecoveryStrategy.parse(recovery)
        self._jobs: dict[str, JobSpec] = {}
        self._placements: dict[str, Placement] = {}
        self.last_refusal: PlacementInfeasible | None = None
        memory = topology.gpu_memory_gb
        self.gpus: list[GPU] = [
            GPU(gpu_id=g, node_id=self._topology.gpu_node[g], memory_gb=memory)
            for g in range(self._topology.num_gpus)
        ]

    # ---- seed API ---------------------------------------------------------------------------------
    def bandwidth_between(self, gpu_a: int, gpu_b: int) -> float:
        return self._topology.bandwidth_between(gpu_a, gpu_b)

    def place_job(self, job: Job) -> dict[str, list[list[int]]] | None:
        """Place every rank of ``job`` or nothing; ``None`` (state unchanged) when it cannot fit now.
        The reasons of a refusal are kept in ``last_refusal``."""
        spec = job.spec()
        if spec.job_id in self._jobs:
            raise InvalidRequest(f"job {spec.job_id!r} is already placed; release it first")
        try:
            placement = self._placer.place(spec, self._model)
        except PlacementInfeasible as refusal:
            self.last_refusal = refusal
            return None
        self._commit(spec, placement)
        return placement.seed_dict()

    def release_job(self, job_id: str) -> bool:
        allocation = self._state.release(job_id)
        if allocation is None:
            return False
        self._jobs.pop(job_id)
        self._placements.pop(job_id)
        self._sync(allocation.gpus)
        return True

    def estimate_communication_cost(self, job: Job, placement: Mapping[str, Any]) -> dict[str, float | str]:
        spec = job.spec()
        groups = _validated_groups(spec, placement, self._topology.num_gpus)
        return rank_level_cost(self._topology, spec, groups, self._model).as_dict()

    def handle_gpu_failure(self, failed_gpu_id: int) -> list[dict[str, Any]]:
        """Mark a GPU failed and repair every job on it; ``[]`` when it was unused or already failed."""
        self._topology.check_gpu(failed_gpu_id)
        if self._state.health[failed_gpu_id] is not GPUHealth.HEALTHY:
            return []
        self._state.set_health(failed_gpu_id, GPUHealth.OFFLINE)
        self._sync([failed_gpu_id])
        actions = []
        for job_id in self._state.jobs_on([failed_gpu_id]):
            spec = self._jobs[job_id]
            old = self._placements[job_id].seed_dict()
            outcome = recover(self._state, self._placer, spec, self._model, self.recovery)
            self._sync(outcome.old.gpus)
            if outcome.new is None:
                del self._jobs[job_id], self._placements[job_id]
            else:
                self._placements[job_id] = outcome.new
                self._sync(outcome.new.gpus)
            actions.append(
                {
                    "job_id": job_id,
                    "action": outcome.action.value,
                    "old_placement": old,
                    "new_placement": None if outcome.new is None else outcome.new.seed_dict(),
                    "cost_before_ms": outcome.cost_before.total_ms,
                    "cost_after_ms": None if outcome.cost_after is None else outcome.cost_after.total_ms,
                    "reasons": list(outcome.reasons),
                }
            )
        return actions

    def find_checkpointable_boundary(self, job: Job) -> int:
        spec = job.spec()
        return checkpointable_boundary(spec.pp, job.stage_activation_sizes)

    # ---- beyond the seed --------------------------------------------------------------------------
    def mark_gpu_healthy(self, gpu_id: int) -> bool:
        """Return a repaired GPU to service; False when it was healthy already."""
        self._topology.check_gpu(gpu_id)
        before = self._state.set_health(gpu_id, GPUHealth.HEALTHY)
        self._sync([gpu_id])
        return before is not GPUHealth.HEALTHY

    def list_jobs(self) -> dict[str, dict[str, list[list[int]]]]:
        return {job_id: p.seed_dict() for job_id, p in self._placements.items()}

    def explain(self, job_id: str) -> tuple[str, ...]:
        """The decision record of a placed job: what was chosen and why."""
        if job_id not in self._placements:
            raise InvalidRequest(f"unknown job {job_id!r}")
        return self._placements[job_id].reasons

    # ---- internals --------------------------------------------------------------------------------
    def _commit(self, spec: JobSpec, placement: Placement) -> None:
        self._state.allocate(Allocation(spec.job_id, placement.groups, spec.memory_per_gpu_gb))
        self._jobs[spec.job_id] = spec
        self._placements[spec.job_id] = placement
        self._sync(placement.gpus)

    def _sync(self, gpus: Sequence[int]) -> None:
        state = self._state
        for g in gpus:
            view = self.gpus[g]
            view.memory_used_gb = state.memory_used[g]
            view.is_healthy = state.health[g] is GPUHealth.HEALTHY


def _validated_groups(spec: JobSpec, placement: Mapping[str, Any], num_gpus: int) -> list[list[int]]:
    if not isinstance(placement, Mapping) or "tp_groups" not in placement:
        raise InvalidRequest("placement must be a dict with 'tp_groups' (as returned by place_job)")
    groups = [list(group) for group in placement["tp_groups"]]
    if len(groups) != spec.num_groups:
        raise InvalidRequest(f"placement has {len(groups)} TP groups; the job needs {spec.num_groups}")
    for group in groups:
        if len(group) != spec.tp:
            raise InvalidRequest(f"a TP group has {len(group)} GPUs; the job's TP size is {spec.tp}")
        for gpu in group:
            if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < num_gpus:
                raise InvalidRequest(f"unknown GPU id {gpu!r} in placement")
    return groups

"""Communication cost models: how long one training step spends in TP, PP and DP communication.

A model turns bandwidths (GB/s per GPU, 1 GB = 1e9 bytes) into milliseconds, one term at a time, so the
placer can reason about a layout from the bandwidth of its bottleneck links alone. Every model must be
monotone: a term never grows when a bandwidth grows, and the total never shrinks when a term grows. The
placer's optimality argument rests on that (and a property test checks it).

* :class:`SeedCostModel` is the seed's formula, the facade's default.
* :class:`MegatronCostModel` is a per-step model in the style of Megatron-LM: per-layer TP all-reduces in
  forward and backward for every micro-batch, PP activation sends both ways under a 1F1B schedule, and DP
  gradient all-reduce of the parameter shard each GPU holds (parameters split over TP x PP), all as NCCL
  rings bounded by their slowest link.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from paralleljob.core.job import JobSpec

TERMS = ("tp", "pp", "dp")


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    tp_ms: float
    pp_ms: float
    dp_ms: float
    total_ms: float

    @property
    def bottleneck(self) -> str:
        """The largest term; ties go to the earlier of tp, pp, dp."""
        values = (self.tp_ms, self.pp_ms, self.dp_ms)
        return TERMS[values.index(max(values))]

    def as_dict(self) -> dict[str, float | str]:
        return {
            "tp_time_ms": self.tp_ms,
            "pp_time_ms": self.pp_ms,
            "dp_time_ms": self.dp_ms,
            "total_ms": self.total_ms,
            "bottleneck": self.bottleneck,
        }


class CostModel(Protocol):
    @property
    def name(self) -> str: ...

    def tp_ms(self, job: JobSpec, bandwidth: float) -> float:
        """One TP group whose slowest pair has ``bandwidth``."""
        ...

    def pp_ms(self, job: JobSpec, boundary_bandwidths: Sequence[float]) -> float:
        """One replica's pipeline, given the bandwidth of each stage boundary p -> p+1."""
        ...

    def dp_ms(self, job: JobSpec, bandwidth: float) -> float:
        """The DP gradient exchange, given the slowest link of any DP group."""
        ...

    def tp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        """(all-reduces per step, bytes each) of one TP group: what ``tp_ms`` prices, for ``core.timing.stepcomm``."""
        ...

    def dp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        """(all-reduces per step, bytes each) of one DP group."""
        ...

    def combine(self, tp: float, pp: float, dp: float) -> float: ...


def transfer_ms(num_bytes: float, bandwidth_gbps: float) -> float:
    """Milliseconds to move ``num_bytes`` at ``bandwidth_gbps`` (GB/s, 1 GB = 1e9 bytes)."""
    if math.isinf(bandwidth_gbps):
        return 0.0
    return num_bytes / (bandwidth_gbps * 1e9) * 1e3


def ring_allreduce_ms(num_bytes: float, members: int, bandwidth_gbps: float) -> float:
    if members <= 1:
        return 0.0
    return 2 * (members - 1) / members * transfer_ms(num_bytes, bandwidth_gbps)


def activation_bytes(job: JobSpec, *, per_micro_batch: bool) -> float:
    m = job.model
    size = float(m.seq_len * m.hidden_dim * m.dtype_bytes)
    return size * m.micro_batch_size if per_micro_batch else size


@dataclass(frozen=True)
class SeedCostModel:
    """The seed formula (SPEC section 2): one all-reduce / send of each kind per step."""

    name: str = "seed"

    def tp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        return 1, activation_bytes(job, per_micro_batch=False)

    def dp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        return 1, job.model.num_params_billions * 1e9 * job.model.dtype_bytes

    def tp_ms(self, job: JobSpec, bandwidth: float) -> float:
        count, size = self.tp_allreduces(job)
        return count * ring_allreduce_ms(size, job.tp, bandwidth)

    def pp_ms(self, job: JobSpec, boundary_bandwidths: Sequence[float]) -> float:
        size = activation_bytes(job, per_micro_batch=True)
        return sum(transfer_ms(size, bw) for bw in boundary_bandwidths)

    def dp_ms(self, job: JobSpec, bandwidth: float) -> float:
        count, size = self.dp_allreduces(job)
        return count * ring_allreduce_ms(size, job.dp, bandwidth)

    def combine(self, tp: float, pp: float, dp: float) -> float:
        return tp + pp + dp


@dataclass(frozen=True)
class MegatronCostModel:
    """A realistic per-step estimate (no compute overlap assumed, so it is an upper bound on exposure)."""

    name: str = "megatron"
    allreduces_per_layer: int = 4  # attention + MLP, forward and backward

    def micro_batches(self, job: JobSpec) -> int:
        m = job.model
        if m.global_batch_size is not None:
            return max(1, m.global_batch_size // (m.micro_batch_size * job.dp))
        return 4 * job.pp  # the usual choice that keeps the 1F1B bubble small

    def layers_per_stage(self, job: JobSpec) -> int:
        return math.ceil(job.model.layers() / job.pp)

    def tp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        count = self.micro_batches(job) * self.layers_per_stage(job) * self.allreduces_per_layer
        return count, activation_bytes(job, per_micro_batch=True)

    def dp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        return 1, job.model.num_params_billions * 1e9 * job.model.dtype_bytes / (job.tp * job.pp)

    def tp_ms(self, job: JobSpec, bandwidth: float) -> float:
        count, size = self.tp_allreduces(job)
        return count * ring_allreduce_ms(size, job.tp, bandwidth)

    def pp_ms(self, job: JobSpec, boundary_bandwidths: Sequence[float]) -> float:
        if not boundary_bandwidths:
            return 0.0
        # Activations forward and gradients backward cross every boundary. Warm-up and drain traverse the
        # whole chain once; in the steady state the slowest boundary paces the remaining micro-batches.
        size = 2 * activation_bytes(job, per_micro_batch=True)
        chain = sum(transfer_ms(size, bw) for bw in boundary_bandwidths)
        slowest = transfer_ms(size, min(boundary_bandwidths))
        return chain + (self.micro_batches(job) - 1) * slowest

    def dp_ms(self, job: JobSpec, bandwidth: float) -> float:
        count, size = self.dp_allreduces(job)
        return count * ring_allreduce_ms(size, job.dp, bandwidth)

    def combine(self, tp: float, pp: float, dp: float) -> float:
        return tp + pp + dp


COST_MODELS: dict[str, CostModel] = {"seed": SeedCostModel(), "megatron": MegatronCostModel()}


def cost_model(name: str) -> CostModel:
    try:
        return COST_MODELS[name]
    except KeyError:
        from paralleljob.core.errors import InvalidRequest

        raise InvalidRequest(f"unknown cost model {name!r}; choose one of {sorted(COST_MODELS)}") from None

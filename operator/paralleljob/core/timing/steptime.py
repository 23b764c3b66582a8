"""The step-time model: how long a job runs on the placement it actually got.

A trace says how long a job ran, not where, nor how many steps it took. The simulator models one training
step as compute plus the time its communication takes on the job's placement, and derives the number of
steps so that the job takes exactly its trace duration on the *ideal* placement (every group in the
smallest domain that holds it: the core placer on an empty cluster)::

    compute_ms   = 6 * params * tokens_per_replica_step / (tp * pp) / (gpu_tflops * mfu)
    step_ms(C)   = compute_ms + (1 - overlap) * C             C = the step's communication in ms
    steps        = duration / step_ms(C_ideal)
    runtime      = steps * step_ms(C_actual)  =  duration * step_ms(C_actual) / step_ms(C_ideal)

``C`` is what the active cost model (seed or Megatron) moves per step, timed by the calibrated collective
model on the placement's actual layout (``core.timing.stepcomm`` over ``core.timing.collectives``), not the cost model's
slowest-link price. So a TP group split across nodes, or a DP ring across a spine, costs the job the
milliseconds NCCL would take next to its compute, not a flat share of its runtime. ``tokens_per_replica_step`` is
micro-batches x micro-batch size x sequence length, with Megatron's micro-batch count (the global batch, or
4 per pipeline stage) under either cost model, so the compute side does not change with the cost model.

Assumptions, every one an option (``--gpu-tflops``, ``--mfu``, ``--comm-overlap``; ``--params-per-shard`` in
the trace shapes): H100 SXM dense BF16 peak 989 TFLOPS; 40% model FLOPs utilisation (Megatron-LM reports
41-52% of A100 peak at scale, Llama 3 38-43% of H100 peak); no overlap of communication with compute by
default (the communication is taken as exposed, which overstates communication for DP with overlapped
gradient reduction; sweep ``--comm-overlap``). The older ``fraction`` model (communication is a fixed share
of a step at the ideal placement, scaled by the cost ratio) stays available as ``--step-model fraction``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paralleljob.core.job import JobSpec
from paralleljob.core.timing.cost import MegatronCostModel

STEP_MODELS = ("flops", "fraction")
_MICRO_BATCHES = MegatronCostModel()


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    kind: str = "flops"
    gpu_tflops: float = 989.0  # peak dense BF16 per GPU (H100 SXM)
    mfu: float = 0.40  # achieved share of that peak
    overlap: float = 0.0  # share of the communication hidden behind compute
    comm_fraction: float = 0.1  # the "fraction" model: communication's share of a step at the ideal placement

    def __post_init__(self) -> None:
        if self.kind not in STEP_MODELS:
            raise ValueError(f"unknown step model {self.kind!r}; choose from {list(STEP_MODELS)}")
        if not (self.gpu_tflops > 0 and math.isfinite(self.gpu_tflops)) or not 0 < self.mfu <= 1:
            raise ValueError("--gpu-tflops must be > 0 and --mfu in (0, 1]")
        if not 0 <= self.overlap < 1 or not 0 <= self.comm_fraction <= 1:
            raise ValueError("--comm-overlap must be in [0, 1) and --comm-fraction in [0, 1]")

    def tokens_per_replica_step(self, job: JobSpec) -> float:
        model = job.model
        return float(_MICRO_BATCHES.micro_batches(job) * model.micro_batch_size * model.seq_len)

    def compute_ms(self, job: JobSpec) -> float:
        """Compute time of one step on each GPU (forward + backward, 6 FLOPs per parameter per token)."""
        flops = 6.0 * job.model.num_params_billions * 1e9 * self.tokens_per_replica_step(job) / (job.tp * job.pp)
        return flops / (self.gpu_tflops * 1e12 * self.mfu) * 1e3

    def step_ms(self, job: JobSpec, comm_ms: float) -> float:
        return self.compute_ms(job) + (1.0 - self.overlap) * comm_ms

    def slowdown(self, job: JobSpec, cost_ms: float, ideal_ms: float) -> float:
        """runtime / trace duration on a placement costing ``cost_ms`` where the ideal costs ``ideal_ms``.
        Never below 1: the trace ran on a placement at least as good as the ideal."""
        if cost_ms <= ideal_ms:
            return 1.0
        if self.kind == "fraction":
            if ideal_ms <= 0:
                return 1.0
            return (1.0 - self.comm_fraction) + self.comm_fraction * cost_ms / ideal_ms
        return self.step_ms(job, cost_ms) / self.step_ms(job, ideal_ms)

    def steps(self, job: JobSpec, duration_s: float, ideal_ms: float) -> float:
        """Training steps a job of this trace duration takes (calibrated on the ideal placement)."""
        return duration_s * 1e3 / self.step_ms(job, ideal_ms)

"""The job as the core sees it: a validated, immutable TP x PP x DP request plus its model shape.

Grid conventions used everywhere in the core: a job has ``dp`` replicas, each of ``pp`` stages, each stage
a tensor-parallel group of ``tp`` GPUs. Group ``(d, p)`` has the flat index ``d * pp + p`` (the seed's
``tp_groups`` order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paralleljob.core.errors import InvalidRequest

# A sane upper bound for one job; larger requests are almost surely typos (e.g. DP 100000).
MAX_TOTAL_GPUS = 1_000_000
MAX_TP = 64
# Model shapes beyond any real model are typos (hidden 2**40 priced a step at 7e15 ms). Each bound admits every
# published model with room to spare: hidden sizes reach 16384-25600, contexts 1-10M tokens, parameter counts
# about 2 trillion. The CRD's CEL rules use the same numbers (k8s/edge/parse/specs.py holds their messages).
MAX_HIDDEN_DIM = 131_072
MAX_SEQ_LEN = 10_000_000
MAX_PARAMS_BILLIONS = 20_000.0


@dataclass(frozen=True, slots=True)
class ModelShape:
    hidden_dim: int = 4096
    seq_len: int = 2048
    micro_batch_size: int = 1
    num_params_billions: float = 70.0
    dtype_bytes: int = 2
    num_layers: int | None = None  # derived from the parameter count when absent
    global_batch_size: int | None = None  # derived (4 micro-batches per stage) when absent

    def layers(self) -> int:
        if self.num_layers is not None:
            return self.num_layers
        # A transformer layer holds ~12 h^2 parameters (attention 4h^2 + MLP 8h^2).
        return max(1, round(self.num_params_billions * 1e9 / (12 * self.hidden_dim**2)))


@dataclass(frozen=True, slots=True)
class JobSpec:
    job_id: str
    tp: int
    pp: int
    dp: int
    memory_per_gpu_gb: float
    model: ModelShape = ModelShape()
    priority: int = 0

    def __post_init__(self) -> None:
        validate_job_fields(self.job_id, self.tp, self.pp, self.dp, self.memory_per_gpu_gb, self.model)

    @property
    def num_groups(self) -> int:
        return self.pp * self.dp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def describe(self) -> str:
        # 0 GB means "no memory requirement", not "needs zero GB": say nothing rather than a misleading 0.
        memory = f", {self.memory_per_gpu_gb:g} GB each" if self.memory_per_gpu_gb > 0 else ""
        gpus = "1 GPU" if self.num_gpus == 1 else f"{self.num_gpus} GPUs"
        return f"TP{self.tp}xPP{self.pp}xDP{self.dp} ({gpus}{memory})"


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise InvalidRequest(f"{name} must be >= 1, got {value}")
    return value


def validate_job_fields(
    job_id: object, tp: object, pp: object, dp: object, memory: object, model: ModelShape
) -> None:
    """Raise :class:`InvalidRequest` naming the first field a user must fix."""
    if not isinstance(job_id, str) or not job_id:
        raise InvalidRequest(f"job_id must be a non-empty string, got {job_id!r}")
    t = _positive_int("tensor_parallel_size", tp)
    p = _positive_int("pipeline_parallel_size", pp)
    d = _positive_int("data_parallel_size", dp)
    if t > MAX_TP:
        raise InvalidRequest(f"tensor_parallel_size {t} exceeds the supported maximum {MAX_TP}")
    if t * p * d > MAX_TOTAL_GPUS:
        raise InvalidRequest(f"the job asks for {t * p * d} GPUs, more than the sane maximum {MAX_TOTAL_GPUS}")
    if isinstance(memory, bool) or not isinstance(memory, int | float) or not math.isfinite(memory):
        raise InvalidRequest(f"memory_per_gpu_gb must be a finite number, got {memory!r}")
    if memory < 0:
        raise InvalidRequest(f"memory_per_gpu_gb must be >= 0, got {memory}")
    for name in ("hidden_dim", "seq_len", "micro_batch_size", "dtype_bytes"):
        _positive_int(name, getattr(model, name))
    for name, limit in (("hidden_dim", MAX_HIDDEN_DIM), ("seq_len", MAX_SEQ_LEN)):
        if getattr(model, name) > limit:
            raise InvalidRequest(f"{name} must be at most {limit} (beyond any real model), got {getattr(model, name)}")
    params = model.num_params_billions
    if isinstance(params, bool) or not isinstance(params, int | float) or not math.isfinite(params) or params <= 0:
        raise InvalidRequest(f"num_params_billions must be a positive number, got {params!r}")
    if params > MAX_PARAMS_BILLIONS:
        raise InvalidRequest(
            f"num_params_billions must be at most {MAX_PARAMS_BILLIONS:g} (beyond any real model), got {params:g}"
        )
    if model.num_layers is not None:
        _positive_int("num_layers", model.num_layers)
    if model.global_batch_size is not None:
        _positive_int("global_batch_size", model.global_batch_size)

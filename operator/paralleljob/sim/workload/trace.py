"""Trace jobs: the generic CSV format, and turning a GPU count into a TP x PP x DP shape.

Generic CSV, one job a row, header required: ``submit_s,duration_s,num_gpus[,tenant][,tp,pp,dp]``.
``duration_s`` is how long the job ran in the trace; the simulator treats it as the job's run time on the
best placement the cluster allows (see docs/simulator.md). Rows are sorted by (submit time, row number).

Shapes from a GPU count when the trace gives none (SPEC section 8), seeded per job so a job's shape does not
depend on which other jobs are in the slice: g <= 8 -> TP=g or DP=g (a coin flip); g = 8k -> TP=8,
PP = the largest divisor of k that is <= 8, DP = k / PP; any other g > 8 -> TP = the largest divisor of g
that is <= 8, PP = 1, DP = g / TP (the SPEC is silent there; this keeps TP inside an 8-GPU node).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from paralleljob.core.job import JobSpec, ModelShape

# Parameters per model shard (TP x PP GPUs): mixed-precision Adam needs ~16 bytes per parameter, so 2B
# parameters fill about 32 GB of an 80 GB GPU and leave room for activations.
PARAMS_BILLIONS_PER_SHARD = 2.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_s: float
    duration_s: float
    num_gpus: int
    tenant: str = "default"
    shape: tuple[int, int, int] | None = None  # (tp, pp, dp) when the trace gives one

    model: ModelShape | None = None  # the model behind the job, when an overlay gives one

    def spec(
        self, seed: int, memory_per_gpu_gb: float = 0.0, params_per_shard: float = PARAMS_BILLIONS_PER_SHARD
    ) -> JobSpec:
        tp, pp, dp = self.shape or shape_for(self.num_gpus, random.Random(f"{seed}:shape:{self.job_id}"))
        model = self.model or ModelShape(num_params_billions=params_per_shard * tp * pp)
        return JobSpec(self.job_id, tp, pp, dp, memory_per_gpu_gb, model)


def largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def shape_for(num_gpus: int, rng: random.Random) -> tuple[int, int, int]:
    """(tp, pp, dp) for a job that only says how many GPUs it wants."""
    if num_gpus < 1:
        raise ValueError(f"a job needs at least one GPU, got {num_gpus}")
    if num_gpus <= 8:
        return (num_gpus, 1, 1) if rng.random() < 0.5 else (1, 1, num_gpus)
    if num_gpus % 8 == 0:
        k = num_gpus // 8
        pp = largest_divisor_at_most(k, 8)
        return (8, pp, k // pp)
    tp = largest_divisor_at_most(num_gpus, 8)
    return (tp, 1, num_gpus // tp)


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and the line."""


def _number(row: dict[str, str], name: str, where: str) -> float:
    value = (row.get(name) or "").strip()
    try:
        number = float(value)
    except ValueError:
        raise TraceError(f"{where}: {name} must be a number, got {value!r}") from None
    if number < 0 or number != number or number == float("inf"):
        raise TraceError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    return number


def _integer(row: dict[str, str], name: str, where: str) -> int:
    number = _number(row, name, where)
    if number != int(number) or number < 1:
        raise TraceError(f"{where}: {name} must be a whole number >= 1, got {row.get(name)!r}")
    return int(number)


def open_csv(path: Path) -> TextIO:
    """A CSV file for reading; a UTF-8 byte-order mark (spreadsheet exports) is dropped, not read as part
    of the first column's name."""
    return path.open(newline="", encoding="utf-8-sig")


def check_row_width(row: Mapping[Any, Any], width: int, where: str) -> None:
    """A row with fewer or more fields than the header is an error naming the line, not a bad value."""
    if None in row or any(value is None for value in row.values()):
        extra = row.get(None)
        have = width + len(extra) if isinstance(extra, list) else sum(1 for v in row.values() if v is not None)
        raise TraceError(f"{where}: {have} field(s), but the header has {width}")


def read_generic(path: Path, limit: int | None = None) -> list[TraceJob]:
    """Read a generic trace CSV; raises :class:`TraceError` naming the first bad line, or when it has no job."""
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        columns = set(reader.fieldnames or ())
        missing = {"submit_s", "duration_s", "num_gpus"} - columns
        if missing:
            raise TraceError(f"{path.name}: missing column(s) {sorted(missing)}; need submit_s,duration_s,num_gpus")
        has_shape = {"tp", "pp", "dp"} <= columns
        jobs: list[TraceJob] = []
        width = len(reader.fieldnames or ())
        for row in reader:
            line = reader.line_num
            where = f"{path.name}:{line}"
            check_row_width(row, width, where)
            gpus = _integer(row, "num_gpus", where)
            shape = None
            if has_shape and any((row.get(c) or "").strip() for c in ("tp", "pp", "dp")):
                shape = (_integer(row, "tp", where), _integer(row, "pp", where), _integer(row, "dp", where))
                if shape[0] * shape[1] * shape[2] != gpus:
                    raise TraceError(f"{where}: tp*pp*dp = {shape[0] * shape[1] * shape[2]} but num_gpus = {gpus}")
            jobs.append(
                TraceJob(
                    job_id=f"job-{len(jobs):06d}",
                    submit_s=_number(row, "submit_s", where),
                    duration_s=_number(row, "duration_s", where),
                    num_gpus=gpus,
                    tenant=(row.get("tenant") or "").strip() or "default",
                    shape=shape,
                )
            )
    if not jobs:
        raise TraceError(f"{path.name}: no jobs (only a header)")
    return sort_and_limit(jobs, limit)


def sort_and_limit(jobs: Iterable[TraceJob], limit: int | None) -> list[TraceJob]:
    ordered = sorted(enumerate(jobs), key=lambda ij: (ij[1].submit_s, ij[0]))
    out = [job for _, job in ordered]
    return out if limit is None else out[:limit]


def write_generic(path: Path, jobs: Sequence[TraceJob]) -> None:
    """Write jobs in the generic format (used by the synthetic-trace generator)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["submit_s", "duration_s", "num_gpus", "tenant"])
        for job in jobs:
            writer.writerow([f"{job.submit_s:.3f}", f"{job.duration_s:.3f}", job.num_gpus, job.tenant])

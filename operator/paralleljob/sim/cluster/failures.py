"""Failure injection: per-node Poisson failures at a published rate, causes drawn from published counts.

Rates and causes are read from ``failure_stats.csv`` (see the traces README): node failure rates in
failures per 1000 node-days (RSC-2 2.34, Llama 3 3.79, RSC-1 6.50) and Llama 3's unexpected interruptions
by cause as counts (the printed percentages do not add up). Each cause's category decides what breaks:

* GPU (faulty GPU, HBM3, SRAM, GSP, SDC, thermal): one GPU of the node goes Offline until repaired.
* Host, Network, Unplanned Maintenance (NIC, PSU, switch or cable, host maintenance...): the whole node.
* Dependency, Unknown (software bugs, NCCL watchdog timeouts): no hardware is lost; the jobs on the node
  crash and restart from their last checkpoint on the same GPUs.

Repair times are an assumption (the sources give none we can use): exponential with a mean of 24 h for a
GPU (swap or RMA) and 6 h for a node (reboot, re-cable, reimage); both are options. Every draw comes from
one seeded ``random.Random`` in a fixed order per failure, so every policy sees the same failures.
"""

from __future__ import annotations

import csv
import enum
import random
import re
from dataclasses import dataclass
from pathlib import Path

SECONDS_PER_DAY = 86_400.0
NAMED_RATES = {"rsc2": "RSC-2", "llama3": "16384xH100", "rsc1": "RSC-1"}


class Scope(enum.Enum):
    GPU = "gpu"
    NODE = "node"
    SOFTWARE = "software"


CATEGORY_SCOPE = {
    "GPU": Scope.GPU,
    "Host": Scope.NODE,
    "Network": Scope.NODE,
    "Unplanned Maintenance": Scope.NODE,
    "Dependency": Scope.SOFTWARE,
    "Unknown": Scope.SOFTWARE,
}
CATEGORY_PATTERN = re.compile(r"category (" + "|".join(sorted(CATEGORY_SCOPE, key=len, reverse=True)) + ")")


@dataclass(frozen=True, slots=True)
class Cause:
    name: str
    count: int
    scope: Scope


@dataclass(frozen=True, slots=True)
class FailureStats:
    rates: dict[str, float]  # name (rsc1, rsc2, llama3) -> failures per 1000 node-days
    causes: tuple[Cause, ...]


def load_failure_stats(path: Path) -> FailureStats:
    rates: dict[str, float] = {}
    causes: list[Cause] = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            metric, scope_text, notes = row["metric"], row["cluster_or_scope"], row.get("notes") or ""
            if metric == "node_failure_rate":
                for name, marker in NAMED_RATES.items():
                    if marker in scope_text and name not in rates:
                        rates[name] = float(row["value"])
            elif scope_text == "cause" and row["unit"] == "count":
                match = CATEGORY_PATTERN.search(notes)
                category = match.group(1) if match else "Unknown"
                causes.append(Cause(metric, int(float(row["value"])), CATEGORY_SCOPE.get(category, Scope.SOFTWARE)))
    if not causes:
        raise ValueError(f"{path.name}: no failure causes found (rows with cluster_or_scope 'cause')")
    return FailureStats(rates, tuple(causes))


def parse_rate(text: str, stats: FailureStats | None) -> float:
    """A rate per 1000 node-days: a number, or rsc1 / rsc2 / llama3 from the stats file, or none."""
    key = text.strip().lower()
    if key in ("none", "off", "0"):
        return 0.0
    if key in NAMED_RATES:
        if stats is None or key not in stats.rates:
            where = "" if stats is None else " (the file given has no such row)"
            raise ValueError(
                f"failure rate {text!r} is read from failure_stats.csv{where}: pass --failure-stats PATH"
                " (without it the file is looked for next to --trace), or give a number per 1000 node-days"
            )
        return stats.rates[key]
    try:
        rate = float(key)
    except ValueError:
        raise ValueError(f"--failures takes a number per 1000 node-days or one of {sorted(NAMED_RATES)}") from None
    if rate < 0 or rate != rate:
        raise ValueError(f"a failure rate must be >= 0, got {text!r}")
    return rate


@dataclass(frozen=True, slots=True)
class Failure:
    time: float
    node: int
    cause: str
    scope: Scope
    gpu_index: int  # which GPU of the node, for GPU-scope failures
    repair_s: float


@dataclass(frozen=True, slots=True)
class FailureConfig:
    rate_per_1000_node_days: float
    causes: tuple[Cause, ...]
    gpu_repair_hours: float = 24.0
    node_repair_hours: float = 6.0


class FailureProcess:
    """The superposition of one Poisson process per node: rate N x lambda, the node uniform."""

    def __init__(self, config: FailureConfig, num_nodes: int, node_gpu_count: tuple[int, ...], seed: int) -> None:
        self.config = config
        self.num_nodes = num_nodes
        self.node_gpu_count = node_gpu_count
        self.rng = random.Random(f"{seed}:failures")
        self.rate_per_s = config.rate_per_1000_node_days / 1000.0 * num_nodes / SECONDS_PER_DAY
        self.weights = [c.count for c in config.causes]

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0 and bool(self.config.causes)

    def next_after(self, now: float) -> Failure:
        rng = self.rng
        time = now + rng.expovariate(self.rate_per_s)
        node = rng.randrange(self.num_nodes)
        cause = rng.choices(self.config.causes, weights=self.weights)[0]
        gpu_index = rng.randrange(max(1, self.node_gpu_count[node]))
        hours = {Scope.GPU: self.config.gpu_repair_hours, Scope.NODE: self.config.node_repair_hours}.get(cause.scope)
        repair = rng.expovariate(1.0 / (hours * 3600.0)) if hours else 0.0
        return Failure(time, node, cause.name, cause.scope, gpu_index, repair)

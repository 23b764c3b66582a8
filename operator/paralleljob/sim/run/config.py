"""The simulator's settings (:class:`SimConfig`), each declared once: its default here, and for the settings
a user sets from the command line, the flag and help that ``paralleljob simulate`` builds its options from
(:func:`cli_options`), so a new setting is one line here, not four in the CLI.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from paralleljob.core.admit import queueing
from paralleljob.core.admit.fifo import DEFAULT_REQUEUE_ORDER, RequeueOrder
from paralleljob.core.failure.repair import DEFAULT_FAILURE_POLICY, FailurePolicy
from paralleljob.core.reoptimize import DEFAULT_RULE, ReoptimizeRule
from paralleljob.core.timing.cost import COST_MODELS
from paralleljob.core.timing.steptime import STEP_MODELS
from paralleljob.sim.cluster.failures import Cause, Failure
from paralleljob.sim.workload.trace import PARAMS_BILLIONS_PER_SHARD


def option(default: Any, flag: str, help_text: str | None, choices: tuple[str, ...] = ()) -> Any:
    """A setting with its command-line flag: the CLI reads the flag, help and choices from the field."""
    return field(default=default, metadata={"flag": flag, "help": help_text, "choices": choices})


@dataclass(frozen=True, slots=True)
class CliOption:
    name: str  # the SimConfig field, also the argparse dest
    flag: str
    default: Any
    help: str | None
    choices: tuple[str, ...]


def cli_options() -> Iterator[CliOption]:
    """The settings ``paralleljob simulate`` exposes, in declaration order."""
    for f in fields(SimConfig):
        if "flag" in f.metadata:
            meta = f.metadata
            yield CliOption(f.name, meta["flag"], f.default, meta["help"], tuple(meta["choices"]))


@dataclass(frozen=True)
class SimConfig:
    """One run's settings; ``option(...)`` marks those ``paralleljob simulate`` sets from its flags."""

    policy: str = "ours"
    queue: str = "fifo"
    cost_model: str = option("seed", "--cost-model", None, tuple(sorted(COST_MODELS)))
    step_model: str = option(
        "flops", "--step-model",
        "flops: compute from FLOPs + the cost model's ms (default); fraction: a fixed share scaled by the cost",
        STEP_MODELS,
    )  # fmt: skip  (see core/timing/steptime.py)
    gpu_tflops: float = option(989.0, "--gpu-tflops", "peak dense TFLOPS per GPU (flops model)")
    mfu: float = option(0.40, "--mfu", "achieved share of that peak (flops model)")
    comm_overlap: float = option(0.0, "--comm-overlap", "share of communication hidden by compute")
    # the "fraction" step model: communication's share of a step at the ideal
    comm_fraction: float = option(0.1, "--comm-fraction", "fraction model: share of a step communicating")
    params_per_shard: float = option(
        PARAMS_BILLIONS_PER_SHARD, "--params-per-shard",
        "billions of parameters per TP x PP shard, for trace jobs that give only a GPU count",
    )  # fmt: skip
    failure_rate: float = 0.0  # node failures per 1000 node-days; 0 disables injection
    causes: tuple[Cause, ...] = ()
    gpu_repair_hours: float = option(24.0, "--gpu-repair-hours", "mean hours to repair a failed GPU")
    node_repair_hours: float = option(6.0, "--node-repair-hours", "mean hours to repair a failed node")
    checkpoint_cost_s: float = option(120.0, "--checkpoint-cost", "seconds to write one checkpoint")
    checkpoint_interval_s: float | None = None  # None: Young/Daly from the job's nodes and the failure rate
    restart_overhead_s: float = option(60.0, "--restart-overhead", "seconds to restart after a failure")
    elastic: float = option(
        0.0, "--elastic",
        "make jobs of 2+ replicas elastic, minData = ceil(F x dp), maxData = dp (0: rigid; sim/run/elastic.py)",
    )  # fmt: skip
    resize_overhead_s: float = option(30.0, "--resize-overhead", "seconds an elastic resize restarts the job")
    start_latency_s: float = 0.0
    memory_per_gpu_gb: float = option(0.0, "--memory-per-gpu", "GB each trace job needs per GPU")
    horizon_s: float | None = None  # stop here; jobs submitted later are not loaded
    # Failures are injected in [0, failure_horizon_s) whatever the policy: the same schedule for every policy
    # of a comparison, however long its own run lasts. None: the horizon, else the trace's span (the last
    # submit + duration), which does not depend on the policy.
    failure_horizon_s: float | None = None
    samples: int = option(200, "--samples", "time-series samples over the run")
    seed: int = 0
    check_invariants: bool = option(False, "--check-invariants", "check GPU conservation after every event")
    scripted_failures: tuple[Failure, ...] = ()  # exact failures (tests), on top of the Poisson ones
    reoptimize_rule: ReoptimizeRule = DEFAULT_RULE  # for policies with reoptimize (ours-reopt)
    quotas: tuple[queueing.QueueSpec, ...] = ()  # per-tenant queues of the core queue policies (workload/quotas.py)
    # The operator's spec.failurePolicy for every job (maxRestarts, onUnplaceable); the strategy is the
    # placement policy's (ours: minimal, ours-full: full).
    failure_policy: FailurePolicy = DEFAULT_FAILURE_POLICY
    # Where a job requeued after its hardware broke stands: the operator's ParallelJobQueue requeueOrder and
    # its default, so the simulator replays what the operator does unless told otherwise.
    requeue_order: RequeueOrder = DEFAULT_REQUEUE_ORDER

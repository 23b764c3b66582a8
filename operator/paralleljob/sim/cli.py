"""``paralleljob simulate``: replay a trace through one or several policies and write a report.

Example (the first one of docs/simulator.md, which quotes its report)::

    paralleljob simulate --trace ../shared/traces/alibaba2023_openb_pods.csv \\
        --node-list ../shared/traces/alibaba2023_openb_gpu_nodes.csv --node-sample 16 \\
        --overlay-3d 0.02 --cost-model megatron --queue fifo-skip \\
        --compare ours,best-fit,volcano,first-fit --failures llama3 --seed 1 --out sim-out/alibaba
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from paralleljob.core.admit.fifo import DEFAULT_REQUEUE_ORDER, RequeueOrder
from paralleljob.core.admit.queueing import QueueSpec
from paralleljob.core.failure.repair import DEFAULT_FAILURE_POLICY, OnUnplaceable
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.timing.steptime import StepTimeModel
from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.clusters import describe, node_list_cluster, oversubscribed, uniform_cluster
from paralleljob.sim.cluster.failures import FailureStats, load_failure_stats, parse_rate
from paralleljob.sim.report.compare import summarize
from paralleljob.sim.report.progress import ProgressBar
from paralleljob.sim.run.config import SimConfig, cli_options
from paralleljob.sim.run.core_queue import PRESETS as CORE_QUEUES
from paralleljob.sim.run.engine import SimResult, Simulation
from paralleljob.sim.run.policies import PLACEMENT_POLICIES, QUEUE_POLICIES
from paralleljob.sim.workload.alibaba import read_pods
from paralleljob.sim.workload.llmnvl import llm_nvl72_workload
from paralleljob.sim.workload.overlay import mixed_workload, overlay_3d
from paralleljob.sim.workload.quotas import DEFAULT_BORROW, DEFAULT_FLOOR_GPUS, parse_quotas
from paralleljob.sim.workload.trace import (
    TraceError,
    TraceJob,
    open_csv,
    read_generic,
    sort_and_limit,
)

DAY = 86_400.0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a trace through the placer and baselines, with failure injection",
        description="Trace-driven discrete-event simulation of the same core placer, recovery and queue policies"
        " the operator runs. Writes metrics.json, timeseries.json, jobs-<policy>.csv, PNG plots and report.md.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="trace CSV (generic or Alibaba 2023 pods)")
    source.add_argument(
        "--workload", choices=["mixed", "llm-nvl72"],
        help="a synthetic workload instead of a trace: mixed = many small jobs + a few large 3D-parallel ones",
    )
    p.add_argument("--workload-jobs", type=int, default=2000, help="jobs of --workload")
    p.add_argument("--workload-load", type=float, default=0.8, help="offered load of --workload")
    p.add_argument("--overlay-3d", type=float, default=0.0,
                   help="replace this share of the trace's jobs with published 3D-parallel LLM layouts")
    p.add_argument("--trace-format", choices=["generic", "alibaba"], help="default: told apart by the header")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--nodes", type=int, help="a uniform cluster of N nodes")
    where.add_argument("--nvl72-racks", type=int, help="a cluster of N GB200 NVL72 racks (18 trays of 4 GPUs each)")
    where.add_argument("--node-list", type=Path, help="nodes from a CSV (Alibaba sn,gpu,model or name,gpus,...)")
    p.add_argument("--node-sample", type=int, help="use a seeded random subset of N nodes of --node-list")
    p.add_argument(
        "--cluster-seed", type=int, default=0,
        help="seed of --node-sample's subset (independent of --seed, so the cluster stays the same across job seeds)",
    )
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--levels", default="", help="levels above the node, e.g. rack:32:50,spine:512:25")
    p.add_argument("--intra-node-bw", type=float, default=600.0, help="GB/s per GPU inside a node")
    p.add_argument("--inter-node-bw", type=float, default=50.0, help="GB/s per GPU across the whole cluster")
    p.add_argument(
        "--oversubscription", type=float, default=1.0,
        help="divide the bandwidth of every level above the lowest switch level by this (Llama 3: 7)",
    )
    p.add_argument("--policy", default="ours", choices=sorted(PLACEMENT_POLICIES))
    p.add_argument("--compare", help="comma-separated policies to run side by side (overrides --policy)")
    p.add_argument("--queue", default="fifo", choices=sorted([*QUEUE_POLICIES, *CORE_QUEUES]))
    p.add_argument(
        "--quotas", default="none",
        help="per-tenant queues (a core-* queue's; under fifo, a line per tenant capped at its max): none; trace"
        " (guarantee from each tenant's share of the trace's GPU-hours, see --quota-floor, --quota-borrow); or a"
        " CSV tenant,weight,guaranteed,max",
    )  # fmt: skip
    p.add_argument("--quota-floor", type=int, default=DEFAULT_FLOOR_GPUS,
                   help="--quotas trace: GPUs guaranteed to every tenant before the demand shares (default 8)")
    p.add_argument("--quota-borrow", type=float, default=DEFAULT_BORROW,
                   help="--quotas trace: a tenant's maximum = this x its guarantee (default 2; 1: no borrowing)")
    p.add_argument("--compare-quotas", action="store_true",
                   help="also run every policy without quotas on the (first) seed; the report puts them side by side")
    p.add_argument("--failures", default="none", help="per 1000 node-days, or rsc2 / llama3 / rsc1, or none")
    p.add_argument("--failure-stats", type=Path, help="failure_stats.csv (default: next to the trace)")
    p.add_argument("--checkpoint-interval", default="young-daly", help="seconds, or young-daly")
    p.add_argument("--days", type=float, help="simulate this many days (later jobs are not loaded)")
    p.add_argument("--max-jobs", type=int, help="only the first N jobs of the trace")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1,
                   help="replicate over seeds seed..seed+K-1; the report adds means, 95%% intervals and ratios")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    for opt in cli_options():  # the simulation's own settings, declared once in run/config.py
        if isinstance(opt.default, bool):
            p.add_argument(opt.flag, dest=opt.name, action="store_true", help=opt.help)
        else:
            p.add_argument(opt.flag, dest=opt.name, type=type(opt.default), default=opt.default,
                           choices=opt.choices or None, help=opt.help)  # fmt: skip
    p.add_argument("--max-restarts", type=int, default=DEFAULT_FAILURE_POLICY.max_restarts,
                   help="the operator's failurePolicy.maxRestarts for every job (default: the operator's)")
    p.add_argument("--on-unplaceable", choices=[o.value for o in OnUnplaceable],
                   default=DEFAULT_FAILURE_POLICY.on_unplaceable.value,
                   help="the operator's failurePolicy.onUnplaceable: Requeue or Fail")
    p.add_argument("--requeue-order", choices=[o.value for o in RequeueOrder], default=DEFAULT_REQUEUE_ORDER.value,
                   help="where a job requeued after its hardware broke waits, the operator's ParallelJobQueue "
                        "requeueOrder: KeepPlace (its place in line, the operator's default) or Back")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (TraceError, ValueError, OSError) as exc:
        print(f"paralleljob simulate: {exc}", file=sys.stderr)
        return 2


def _trace_format(path: Path, given: str | None) -> str:
    if given:
        return given
    with open_csv(path) as handle:
        header = handle.readline()
    return "alibaba" if "creation_time" in header and "num_gpu" in header else "generic"


def load_trace(path: Path, fmt: str, limit: int | None) -> list[TraceJob]:
    return read_pods(path, limit) if fmt == "alibaba" else read_generic(path, limit)


def _jobs(args: argparse.Namespace, cluster_gpus: int, seed: int) -> tuple[list[TraceJob], dict[str, Any]]:
    """The jobs to replay and how the header describes them."""
    if args.workload is not None:
        make = llm_nvl72_workload if args.workload == "llm-nvl72" else mixed_workload
        trace = make(args.workload_jobs, cluster_gpus, seed=seed, load=args.workload_load)
        return sort_and_limit(trace, args.max_jobs), {
            "file": None, "format": f"synthetic {args.workload}", "offered_load": args.workload_load
        }
    fmt = _trace_format(args.trace, args.trace_format)
    trace = load_trace(args.trace, fmt, args.max_jobs)
    info: dict[str, Any] = {"file": args.trace.name, "format": fmt}
    if args.overlay_3d:
        trace = overlay_3d(trace, args.overlay_3d, cluster_gpus // 2, seed)
        info["overlay_3d_share"] = args.overlay_3d
    return trace, info


def _failure_stats(args: argparse.Namespace) -> FailureStats | None:
    if args.failure_stats is None and args.trace is None:
        return None
    path = args.failure_stats or args.trace.parent / "failure_stats.csv"
    if path.is_file():
        return load_failure_stats(path)
    if args.failure_stats is not None:
        raise ValueError(f"failure stats file {args.failure_stats} not found")
    return None


def _config(
    args: argparse.Namespace, policy: str, stats: FailureStats | None, rate: float, seed: int,
    quotas: tuple[QueueSpec, ...] = (),
) -> SimConfig:  # fmt: skip
    interval = None if args.checkpoint_interval == "young-daly" else float(args.checkpoint_interval)
    if args.max_restarts < 0:
        raise ValueError("--max-restarts must be >= 0")
    failure_policy = replace(
        DEFAULT_FAILURE_POLICY, max_restarts=args.max_restarts, on_unplaceable=OnUnplaceable(args.on_unplaceable)
    )
    return SimConfig(
        policy=policy,
        queue=args.queue,
        **{opt.name: getattr(args, opt.name) for opt in cli_options()},
        failure_rate=rate,
        causes=stats.causes if stats and rate > 0 else (),
        checkpoint_interval_s=interval,
        horizon_s=args.days * DAY if args.days is not None else None,
        seed=seed,
        failure_policy=failure_policy,
        requeue_order=RequeueOrder(args.requeue_order),
        quotas=quotas,
    )


@dataclass(frozen=True)
class _Runs:
    """What every run of one command shares: its arguments, cluster, policies and failure injection."""

    args: argparse.Namespace
    topology: Topology
    policies: list[str]
    stats: FailureStats | None
    rate: float


def _run_policies(
    runs: _Runs, trace: list[TraceJob], seed: int, quotas: tuple[QueueSpec, ...] = (), label: str = ""
) -> tuple[dict[str, SimResult], int]:
    args = runs.args
    results: dict[str, SimResult] = {}
    replayed = len(trace)
    for policy in runs.policies:
        config = _config(args, policy, runs.stats, runs.rate, seed, quotas)
        simulation = Simulation(runs.topology, trace, config, progress=None)
        replayed = len(simulation.trace)  # --days leaves out the jobs submitted after the horizon
        if not replayed:
            raise ValueError(f"no job of the trace is submitted within --days {args.days:g}")
        bar = ProgressBar(f"{policy}{label} seed {seed}", simulation.span)
        simulation.progress = bar
        started = time.monotonic()
        results[policy] = simulation.run()
        bar.close()
        wall = time.monotonic() - started
        events = results[policy].metrics["events"]
        print(f"{policy}{label} (seed {seed}): {replayed} jobs, {events} events in {wall:.1f} s", file=sys.stderr)
        rejected = results[policy].metrics["jobs"]["rejected"]
        if rejected:
            print(f"{policy}: {rejected} job(s) rejected (can never fit); they are in no JCT", file=sys.stderr)
    return results, replayed


def _run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in (args.compare or args.policy).split(",") if p.strip()]
    unknown = [p for p in policies if p not in PLACEMENT_POLICIES]
    if unknown or not policies:
        raise ValueError(f"unknown policy {unknown}; choose from {sorted(PLACEMENT_POLICIES)}")
    StepTimeModel(args.step_model, args.gpu_tflops, args.mfu, args.comm_overlap, args.comm_fraction)  # validates
    bandwidths = (args.intra_node_bw, args.inter_node_bw)
    if args.nvl72_racks is not None:
        topology = nvl72_topology(args.nvl72_racks)
    elif args.nodes is not None:
        levels = oversubscribed(args.levels, args.oversubscription)
        inter = args.inter_node_bw / (args.oversubscription if levels else 1.0)
        topology = uniform_cluster(args.nodes, args.gpus_per_node, levels, args.intra_node_bw, inter)
    else:
        if args.oversubscription != 1.0:
            raise ValueError("--oversubscription needs --nodes with --levels (a node list has one network level)")
        topology = node_list_cluster(args.node_list, args.node_sample, args.cluster_seed, *bandwidths)
    stats = _failure_stats(args)
    rate = parse_rate(args.failures, stats)
    if rate > 0 and stats is None:
        raise ValueError("failure injection needs failure_stats.csv for its causes: pass --failure-stats")
    if args.seeds < 1:
        raise ValueError("--seeds must be >= 1")
    seeds = list(range(args.seed, args.seed + args.seeds))
    if args.compare_quotas and args.quotas == "none":
        raise ValueError("--compare-quotas compares with --quotas trace or a quota file: give one")
    runs = _Runs(args, topology, policies, stats, rate)
    by_seed: dict[int, dict[str, SimResult]] = {}
    first: tuple[int, int, dict[str, Any]] | None = None  # the first seed's jobs read, replayed, description
    without: dict[str, SimResult] = {}  # the first seed's runs without quotas (--compare-quotas)
    for seed in seeds:
        trace, trace_info = _jobs(args, topology.num_gpus, seed)
        # From the jobs as replayed (overlay included), so a 3D-parallel job's GPU-hours count for its tenant.
        quotas = parse_quotas(args.quotas, trace, topology.num_gpus, args.quota_borrow, args.quota_floor)
        by_seed[seed], replayed = _run_policies(runs, trace, seed, quotas)
        if args.compare_quotas and seed == seeds[0]:
            without, _ = _run_policies(runs, trace, seed, (), " without quotas")
        first = first or (len(trace), replayed, trace_info)
    assert first is not None
    results = by_seed[seeds[0]]
    jobs_read, replayed, trace_info = first
    header: dict[str, Any] = {
        "trace": {**trace_info, "jobs": replayed, "jobs_read": jobs_read},
        "cluster": describe(topology),
        "config": {
            "seed": args.seed,
            "cluster_seed": args.cluster_seed,
            "queue": args.queue,
            "quotas": args.quotas,
            **(
                {"quota_floor_gpus": args.quota_floor, "quota_borrow": args.quota_borrow}
                if args.quotas == "trace"
                else {}
            ),
            "cost_model": args.cost_model,
            "step_model": args.step_model,
            **(
                {"comm_fraction": args.comm_fraction}
                if args.step_model == "fraction"
                else {"gpu_tflops": args.gpu_tflops, "mfu": args.mfu, "comm_overlap": args.comm_overlap}
            ),
            "params_per_shard": args.params_per_shard,
            "failure_rate_per_1000_node_days": rate,
            "checkpoint_interval": args.checkpoint_interval,
            "checkpoint_cost_s": args.checkpoint_cost_s,
            "restart_overhead_s": args.restart_overhead_s,
            # only when asked for, so a rigid run's header is what it was (the golden slice)
            **({"elastic": args.elastic, "resize_overhead_s": args.resize_overhead_s} if args.elastic else {}),
            "gpu_repair_hours": args.gpu_repair_hours,
            "node_repair_hours": args.node_repair_hours,
            "max_restarts": args.max_restarts,
            "on_unplaceable": args.on_unplaceable,
            "days": args.days,
            "oversubscription": args.oversubscription,
        },
    }
    plots = None
    if not args.no_plots:
        from paralleljob.sim.report.plots import plot_all  # matplotlib only when plots are wanted

        plots = plot_all(results, args.out, by_seed if len(seeds) > 1 else None)
    from paralleljob.sim.report.report import write_outputs

    comparison = summarize({s: {p: r.metrics for p, r in runs.items()} for s, runs in by_seed.items()})
    if len(seeds) > 1:
        header = {**header, "seeds": seeds, **comparison}
        header["per_seed"] = {str(s): {p: r.metrics for p, r in runs.items()} for s, runs in by_seed.items()}
    if without:
        header["without_quotas"] = {p: r.metrics for p, r in without.items()}
    write_outputs(args.out, header, results, plots)
    print(f"wrote {args.out / 'metrics.json'} and {args.out / 'report.md'}", file=sys.stderr)
    return 0

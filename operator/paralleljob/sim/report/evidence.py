"""The experiments behind docs/simulator.md's conclusions, re-runnable: ``python -m paralleljob.sim.report.evidence``.

* ``placement``: ours vs best-fit vs Volcano-style vs first-fit on the synthetic mixed workload and on the
  Alibaba trace with the 3D overlay, on a rack/spine cluster with Llama 3's 1:7 oversubscription above the
  rack, Megatron cost model, Llama 3 failure rate.
* ``recovery``: minimal vs full recovery, each with and without migration back (core.reoptimize), under
  load and at 1x and 10x the Llama 3 failure rate.
* ``reopt-sweep``: the re-optimisation rule's thresholds.
* ``failures-vs-best-fit``: ours (each recovery setting) against best-fit on the Alibaba trace's heterogeneous
  2-8 GPU nodes, mostly small jobs, strict FIFO, with no failures and at 1x and 10x the Llama 3 rate, under
  the operator's failure rules (core.failure.repair).
* ``small-nodes``: ours against best-fit on issue 43's Philly-like setting: 88 GPUs on nodes of 8, 4 and 2,
  1,000 mostly single-GPU jobs at load 0.9, strict FIFO, at 1x and 10x the Llama 3 failure rate.
* ``sharing``: whole GPUs vs MIG slices vs MPS shares for the Alibaba trace's fractional pods, on node
  samples (one a seed), at the arrival speed-ups of ``--speedups`` (issue 44; ``report/sharing.py``).
* ``moves``: issue 40's moves that free room on 64 NVL72 racks against no moves, clique best-fit and
  preemption (``report/movesevidence.py``; ``--first-seed 0 --seeds 3`` is docs/simulator.md's table).
* ``validate``: the Megatron cost model on Megatron-LM's published layouts, for comparison with the paper.

Each prints Markdown tables (mean ± 95% half-width over the seeds, and per-seed ratios). Same arguments,
same output. Minutes, not seconds: not part of the test suite.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from paralleljob.core.admit.fifo import DEFAULT_REQUEUE_ORDER, RequeueOrder
from paralleljob.core.reoptimize import ReoptimizeRule
from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.clusters import mixed_node_cluster, node_list_cluster, oversubscribed, uniform_cluster
from paralleljob.sim.cluster.failures import load_failure_stats
from paralleljob.sim.report.compare import fmt_ci, mean_ci, metric, summarize
from paralleljob.sim.report.movesevidence import POLICIES, moves_table
from paralleljob.sim.report.sharing import sharing_table
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.alibaba import read_pods
from paralleljob.sim.workload.overlay import mixed_workload, overlay_3d
from paralleljob.sim.workload.smalljobs import small_jobs_workload
from paralleljob.sim.workload.trace import TraceJob

SMALL_JOBS = 1_000  # small-nodes: about four days of arrivals on its 88 GPUs
HETERO_NODES = 24  # of the trace's 1,213 nodes (1-8 GPUs): few enough that 600 mixed jobs queue at load 0.9
TRACES = Path(__file__).resolve().parents[4].parent / "shared" / "traces"
ROWS = (
    ("mean JCT (h)", ("jct_s", "mean"), 1 / 3600.0, 2),
    ("p99 JCT (h)", ("jct_s", "p99"), 1 / 3600.0, 1),
    ("mean queueing (h)", ("queueing_delay_s", "mean"), 1 / 3600.0, 2),
    ("allocation, busy period (%)", ("gpu_allocation_busy_period",), 100.0, 1),
    ("slowdown, multi-GPU (x)", ("slowdown_multi_gpu_jobs", "mean"), 1.0, 3),
    ("TP groups across nodes", ("tp_groups_across_nodes",), 1.0, 0),
    ("ETTR", ("ettr",), 1.0, 3),
    ("goodput lost (GPU-h)", ("goodput_lost", "total_gpu_hours"), 1.0, 0),
    ("jobs given up (maxRestarts)", ("jobs", "failed"), 1.0, 1),
    ("jobs requeued after a failure", ("failures", "requeued"), 1.0, 1),
)


def cluster(nodes: int = 64, oversubscription: float = 7.0) -> Topology:
    return uniform_cluster(nodes, 8, oversubscribed("rack:8:50,spine:32:50", oversubscription), 600.0, 50.0 / 7)


def grid(
    topology: Topology, workload: Callable[[int], Sequence[TraceJob]], configs: Mapping[str, SimConfig],
    seeds: Sequence[int],
) -> dict[int, dict[str, dict[str, Any]]]:  # fmt: skip
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for seed in seeds:
        trace = workload(seed)
        out[seed] = {
            name: Simulation(topology, trace, replace(config, seed=seed)).run().metrics
            for name, config in configs.items()
        }
    return out


def table(by_seed: Mapping[int, Mapping[str, Mapping[str, Any]]], against: str) -> str:
    names = list(next(iter(by_seed.values())))
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, path, scale, digits in ROWS:
        cells = [fmt_ci(mean_ci([v for r in by_seed.values() if (v := metric(r[n], path)) is not None]), scale, digits)
                 for n in names]  # fmt: skip
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for label, path in (("mean JCT", ("jct_s", "mean")), ("p99 JCT", ("jct_s", "p99"))):
        cells = []
        for n in names:
            ratios = [m / b for r in by_seed.values() if (m := metric(r[n], path)) and (b := metric(r[against], path))]
            cells.append(fmt_ci(mean_ci(ratios), 1.0, 3))
        lines.append(f"| {label} / {against} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def base_config(rate: float, **extra: Any) -> SimConfig:
    stats = load_failure_stats(TRACES / "failure_stats.csv")
    return SimConfig(cost_model="megatron", failure_rate=rate, causes=stats.causes if rate else (), **extra)


def placement(seeds: Sequence[int]) -> None:
    llama3 = load_failure_stats(TRACES / "failure_stats.csv").rates["llama3"]
    topology = cluster()
    configs = {p: replace(base_config(llama3), policy=p) for p in ("ours", "best-fit", "volcano", "first-fit")}
    print(f"## Mixed workload, 1,500 jobs, load 0.8, {topology.num_gpus} GPUs, Llama 3 failure rate\n")
    print(table(grid(topology, lambda s: mixed_workload(1500, topology.num_gpus, seed=s, load=0.8), configs, seeds),
                "best-fit"))  # fmt: skip
    pods = read_pods(TRACES / "alibaba2023_openb_pods.csv")
    # The openb trace is light (it peaks at ~70 GPUs in use): on 24 nodes (one rack of 8 and two more) with
    # 2% of its jobs turned into published LLM layouts of up to half the cluster, jobs queue for hours. Strict
    # FIFO would hold the whole trace behind one large job for weeks, so every policy gets FIFO with skipping.
    small = cluster(24)
    print("\n## Alibaba 2023 openb trace (7,064 jobs), 2% replaced by 3D-parallel layouts, 24 nodes, fifo-skip\n")
    workload = lambda s: overlay_3d(pods, 0.02, small.num_gpus // 2, s)  # noqa: E731
    skip = {name: replace(config, queue="fifo-skip") for name, config in configs.items()}
    print(table(grid(small, workload, skip, seeds), "best-fit"))


def recovery(seeds: Sequence[int], loads: Sequence[float] = (0.7, 0.9), factors: Sequence[float] = (1, 10)) -> None:
    llama3 = load_failure_stats(TRACES / "failure_stats.csv").rates["llama3"]
    topology = cluster()
    policies = ("ours", "ours-full", "ours-reopt", "ours-full-reopt", "best-fit")
    for load in loads:
        for factor in factors:
            configs = {p: replace(base_config(llama3 * factor), policy=p) for p in policies}
            rate = llama3 * factor
            print(f"\n## 600 jobs at load {load}, {factor:g}x the Llama 3 failure rate ({rate:g} per 1000 node-days)\n")
            work = lambda s, load=load: mixed_workload(600, topology.num_gpus, seed=s, load=load)  # noqa: E731
            print(table(grid(topology, work, configs, seeds), "ours-full"))


def recovery_why(seeds: Sequence[int]) -> None:
    """Minimal vs full under the measurement as it was (flat fraction model, failures until each policy's
    run ends) and as it is now, one change at a time."""
    llama3 = load_failure_stats(TRACES / "failure_stats.csv").rates["llama3"]
    topology = cluster()
    variants: dict[str, dict[str, Any]] = {
        "fraction, own horizon": {"step_model": "fraction", "failure_horizon_s": 1e15},
        "fraction, one horizon": {"step_model": "fraction"},
        "flops, one horizon": {},
    }
    for label, extra in variants.items():
        configs = {p: replace(base_config(llama3 * 10, **extra), policy=p) for p in ("ours", "ours-full")}
        print(f"\n## {label}: 600 jobs at load 0.9, 10x the Llama 3 failure rate\n")
        work = lambda s: mixed_workload(600, topology.num_gpus, seed=s, load=0.9)  # noqa: E731
        print(table(grid(topology, work, configs, seeds), "ours-full"))


def reopt_sweep(seeds: Sequence[int]) -> None:
    llama3 = load_failure_stats(TRACES / "failure_stats.csv").rates["llama3"]
    topology = cluster()
    configs = {"ours": replace(base_config(llama3 * 10), policy="ours")}
    for ratio in (1.05, 1.2, 2.0):
        for share in (0.1, 0.25, 1.0):
            rule = ReoptimizeRule(min_cost_ratio=ratio, max_overhead_share=share)
            configs[f"r{ratio:g}/s{share:g}"] = replace(
                base_config(llama3 * 10), policy="ours-reopt", reoptimize_rule=rule
            )
    print("\n## Migration rule sweep: load 0.9, 10x Llama 3 failures; columns min_cost_ratio / max_overhead_share\n")
    work = lambda s: mixed_workload(600, topology.num_gpus, seed=s, load=0.9)  # noqa: E731
    by_seed = grid(topology, work, configs, seeds)
    print(table(by_seed, "ours"))
    print("\nmigrations back:", {n: mean_ci([r[n].get("migrations_back", 0) for r in by_seed.values()])["mean"]
                                 for n in configs})  # fmt: skip
    _ = summarize  # the CLI's aggregation; the tables here use the same mean_ci


def failures_vs_best_fit(seeds: Sequence[int], order: RequeueOrder = DEFAULT_REQUEUE_ORDER) -> None:
    """Issue 23's setting: does failure handling cost us against best-fit on small heterogeneous nodes?"""
    llama3 = load_failure_stats(TRACES / "failure_stats.csv").rates["llama3"]
    topology = node_list_cluster(TRACES / "alibaba2023_openb_gpu_nodes.csv", HETERO_NODES, 0)
    sizes = Counter(topology.node_gpu_count)
    policies = ("best-fit", "ours", "ours-full", "ours-reopt", "ours-full-reopt")
    work = lambda s: mixed_workload(600, topology.num_gpus, seed=s, load=0.9)  # noqa: E731
    for factor in (0, 1, 10):
        configs = {p: replace(base_config(llama3 * factor, requeue_order=order), policy=p) for p in policies}
        print(f"\n## 600 jobs at load 0.9 on {HETERO_NODES} Alibaba nodes {dict(sorted(sizes.items()))} (GPUs: nodes),"
              f" strict FIFO, {factor:g}x the Llama 3 failure rate, requeue order {order.value}\n")  # fmt: skip
        by_seed = grid(topology, work, configs, seeds)
        print(table(by_seed, "best-fit"))
        ratios = [r["ours-reopt"]["jct_s"]["mean"] / r["best-fit"]["jct_s"]["mean"] for r in by_seed.values()]
        print("\nours-reopt / best-fit per seed:", " ".join(f"{x:.3f}" for x in ratios))
        moves = {n: mean_ci([r[n].get("migrations_back", 0) for r in by_seed.values()])["mean"] for n in policies}
        shown = {n: round(float(m or 0), 2) for n, m in moves.items() if n.endswith("reopt")}
        print("\nmigrations back per run:", shown)


def small_nodes(
    seeds: Sequence[int], factors: Sequence[float] = (1, 10), order: RequeueOrder = DEFAULT_REQUEUE_ORDER
) -> None:
    """Issue 43's setting: placement barely matters, so the failure path must not cost anything."""
    llama3 = load_failure_stats(TRACES / "failure_stats.csv").rates["llama3"]
    topology = mixed_node_cluster()
    policies = ("best-fit", "ours", "ours-reopt")
    work = lambda s: small_jobs_workload(SMALL_JOBS, topology.num_gpus, seed=s)  # noqa: E731
    for factor in factors:
        configs = {p: replace(base_config(llama3 * factor, requeue_order=order), policy=p) for p in policies}
        print(f"\n## {SMALL_JOBS:,} mostly single-GPU jobs at load 0.9 on {topology.num_gpus} GPUs (nodes of 8, 4, 2),"
              f" strict FIFO, {factor:g}x the Llama 3 failure rate, requeue order {order.value}\n")  # fmt: skip
        by_seed = grid(topology, work, configs, seeds)
        print(table(by_seed, "best-fit"))
        for name in policies[1:]:
            ratios = [r[name]["jct_s"]["mean"] / r["best-fit"]["jct_s"]["mean"] for r in by_seed.values()]
            print(f"\n{name} / best-fit per seed:", " ".join(f"{x:.3f}" for x in ratios))


def validate(seeds: Sequence[int]) -> None:
    """The Megatron model on Megatron-LM's published layouts, with A100-era figures (docs/simulator.md)."""
    from paralleljob.core.cluster import ClusterState
    from paralleljob.core.job import JobSpec
    from paralleljob.core.placing.placer import Placer
    from paralleljob.core.timing.cost import MegatronCostModel
    from paralleljob.core.timing.steptime import StepTimeModel
    from paralleljob.sim.workload.overlay import PUBLISHED_LAYOUTS, model_of

    model, peak, kernel_eff = MegatronCostModel(), StepTimeModel(gpu_tflops=312.0, mfu=1.0), 0.6
    print("| layout | TP x PP x DP | GPUs | compute/step (s) | TP, PP, DP comm/step (s) | comm share | implied MFU |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for lay in PUBLISHED_LAYOUTS:
        if lay.name.startswith("llama"):
            continue
        topology = Topology.uniform(lay.gpus // 8, 8, intra_node_bw_gbps=240.0, inter_node_bw_gbps=25.0)
        job = JobSpec(lay.name, lay.tp, lay.pp, lay.dp, 0.0, model_of(lay, lay.dp))
        cost = Placer(ClusterState(topology)).place(job, model).cost
        compute = peak.compute_ms(job) / kernel_eff
        share = cost.total_ms / (compute + cost.total_ms)
        print(f"| {lay.name} | {lay.tp}x{lay.pp}x{lay.dp} | {lay.gpus} | {compute / 1e3:.2f} |"
              f" {cost.tp_ms / 1e3:.2f}, {cost.pp_ms / 1e3:.2f}, {cost.dp_ms / 1e3:.2f} | {share:.0%} |"
              f" {kernel_eff * (1 - share):.0%} |")  # fmt: skip
    lay = next(x for x in PUBLISHED_LAYOUTS if x.name == "gpt-18b")
    for tp, bandwidth in ((8, 240.0), (16, 25.0)):
        job = JobSpec("tp", tp, 1, lay.gpus // tp, 0.0, model_of(lay, lay.gpus // tp))
        print(
            f"\n{lay.name} with TP{tp}: TP all-reduces {model.tp_ms(job, bandwidth) / 1e3:.2f} s per step,"
            f" compute {peak.compute_ms(job) / kernel_eff / 1e3:.2f} s"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paralleljob.sim.report.evidence", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "what",
        choices=[
            "placement", "recovery", "recovery-why", "reopt-sweep", "failures-vs-best-fit", "small-nodes", "validate",
            "sharing", "moves",
        ],
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1, help="the seeds run are this one and the next ones")
    parser.add_argument("--racks", type=int, default=64, help="moves: NVL72 racks")
    parser.add_argument("--jobs", type=int, default=1500, help="moves: jobs of the LLM workload")
    parser.add_argument("--policies", default=",".join(POLICIES[:3]), help="moves: the policies compared")
    parser.add_argument("--keep", type=Path, help="moves: keep each run's metrics here, and reuse those kept")
    parser.add_argument("--loads", default="0.7,0.9", help="recovery: offered loads")
    parser.add_argument("--factors", default="1,10", help="recovery, small-nodes: multiples of Llama 3's failure rate")
    parser.add_argument(
        "--requeue-order", choices=[o.value for o in RequeueOrder], default=DEFAULT_REQUEUE_ORDER.value,
        help="failures-vs-best-fit, small-nodes: where a job requeued after its hardware broke waits",
    )  # fmt: skip
    parser.add_argument("--speedups", default="1,4", help="sharing: arrival times divided by each of these")
    parser.add_argument("--sharing-nodes", type=int, default=16, help="sharing: nodes sampled from the node list")
    args = parser.parse_args(argv)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.what == "moves":
        print(moves_table(seeds, TRACES, args.racks, args.jobs, args.policies.split(","), args.keep))
        return 0
    if args.what == "sharing":
        for speedup in (float(x) for x in args.speedups.split(",")):
            print("\n" + sharing_table(TRACES, seeds, speedup, args.sharing_nodes) + "\n")
        return 0
    order = RequeueOrder(args.requeue_order)
    if args.what == "small-nodes":
        small_nodes(seeds, [float(x) for x in args.factors.split(",")], order)
        return 0
    if args.what == "failures-vs-best-fit":
        failures_vs_best_fit(seeds, order)
        return 0
    if args.what == "recovery":
        recovery(seeds, [float(x) for x in args.loads.split(",")], [float(x) for x in args.factors.split(",")])
        return 0
    experiments = {
        "placement": placement, "recovery-why": recovery_why, "reopt-sweep": reopt_sweep, "validate": validate,
        "failures-vs-best-fit": failures_vs_best_fit, "small-nodes": small_nodes,
    }  # fmt: skip
    experiments[args.what](seeds)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""`paralleljob bench placement`: how fast the core places, refuses and repairs at 1k-100k GPUs.

Each cluster is filled to about half with random jobs through the real placer, a few GPUs are failed,
then the benchmark times: placing (and releasing) a TP8xPP8xDP16 job, an infeasible request, and one GPU
failure inside the big job under both recovery strategies. It reports medians over repeats, and the
memory of the whole model (topology + state) measured with tracemalloc.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from paralleljob.bench_kueue_args import add_kueue_arguments
from paralleljob.benchload import clock, fill
from paralleljob.core import (
    Allocation,
    ClusterState,
    GPUHealth,
    JobSpec,
    PlacementInfeasible,
    Placer,
    RecoveryStrategy,
    Topology,
    cost_model,
    recover,
)

TOPOLOGIES: dict[str, list[tuple[str, int, float]]] = {
    "flat": [],  # the seed's two levels: node, cluster
    "tree": [("rack", 32, 200.0), ("spine", 512, 100.0)],  # node, rack, spine, cluster
}


@dataclass
class BenchResult:
    gpus: int
    topology: str
    big_job: str
    fill_allocated: float
    build_s: float
    model_memory_mb: float
    place_ms: float
    place_p90_ms: float
    place_wall_ms: float
    release_ms: float
    infeasible_ms: float
    failure_full_ms: float
    failure_minimal_ms: float
    big_cost_ms: float
    proven_optimal: bool


def build_cluster(gpus: int, topology: str, seed: int) -> tuple[ClusterState, float, float]:
    tracemalloc.start()
    start = time.perf_counter()
    topo = Topology.uniform(gpus // 8, 8, levels=TOPOLOGIES[topology])
    state = ClusterState(topo)
    build_s = time.perf_counter() - start
    memory_mb = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    fill(state, seed)
    return state, build_s, memory_mb


def big_job_for(state: ClusterState) -> JobSpec:
    """TP8xPP8xDP16 where it fits; on small clusters the largest DP that fits now."""
    free_nodes = state.free_histogram(state.topology.top, 0, 40.0)[8]
    dp = 16
    while dp > 1 and 8 * dp > free_nodes:
        dp //= 2
    pp = 8 if 8 * dp <= free_nodes else max(1, free_nodes // dp)
    return JobSpec("big", 8, pp, dp, 40.0)


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = clock()
        fn()
        samples.append((clock() - start) * 1e3)
    return samples


def run(gpus: int, topology: str, repeat: int, seed: int) -> BenchResult:
    state, build_s, memory_mb = build_cluster(gpus, topology, seed)
    placer, model = Placer(state), cost_model("seed")
    allocated = state.counts()["allocated"] / state.topology.num_gpus
    job = big_job_for(state)
    place_samples: list[float] = []
    wall_samples: list[float] = []
    release_samples: list[float] = []
    cost = 0.0
    proven = False
    for _ in range(repeat):
        start, wall = clock(), time.perf_counter()
        placement = placer.place(job, model)
        state.allocate(Allocation(job.job_id, placement.groups, job.memory_per_gpu_gb))
        place_samples.append((clock() - start) * 1e3)
        wall_samples.append((time.perf_counter() - wall) * 1e3)
        cost, proven = placement.cost.total_ms, placement.proven_optimal
        start = clock()
        state.release(job.job_id)
        release_samples.append((clock() - start) * 1e3)
    too_big = JobSpec("too-big", 8, 8, state.topology.num_nodes, 40.0)

    def refuse() -> None:
        try:
            placer.place(too_big, model)
        except PlacementInfeasible:
            return
        raise AssertionError("the infeasible request was placed")

    infeasible = timed(refuse, repeat * 5)
    failures = {}
    rng = random.Random(seed)
    for strategy in RecoveryStrategy:
        samples = []
        for _ in range(repeat):
            placement = placer.place(job, model)
            state.allocate(Allocation(job.job_id, placement.groups, job.memory_per_gpu_gb))
            gpu = rng.choice(placement.gpus)
            start = clock()
            state.set_health(gpu, GPUHealth.OFFLINE)
            outcome = recover(state, placer, job, model, strategy)
            samples.append((clock() - start) * 1e3)
            if outcome.new is not None:
                state.release(job.job_id)
            state.set_health(gpu, GPUHealth.HEALTHY)
        failures[strategy] = statistics.median(samples)
    return BenchResult(
        gpus=gpus,
        topology=topology,
        big_job=job.describe(),
        fill_allocated=round(allocated, 3),
        build_s=round(build_s, 3),
        model_memory_mb=round(memory_mb, 1),
        place_ms=round(statistics.median(place_samples), 3),
        place_p90_ms=round(sorted(place_samples)[int(0.9 * (len(place_samples) - 1))], 3),
        place_wall_ms=round(statistics.median(wall_samples), 3),
        release_ms=round(statistics.median(release_samples), 3),
        infeasible_ms=round(statistics.median(infeasible), 4),
        failure_full_ms=round(failures[RecoveryStrategy.FULL], 3),
        failure_minimal_ms=round(failures[RecoveryStrategy.MINIMAL], 3),
        big_cost_ms=round(cost, 3),
        proven_optimal=proven,
    )


def render(results: list[BenchResult]) -> str:
    header = (
        "| GPUs | topology | job | filled | model MB | place ms CPU (median/p90) | place ms wall | release ms"
        " | infeasible ms | failure full ms | failure minimal ms | cost ms | proven |"
    )
    lines = [header, "|" + "---|" * 13]
    for r in results:
        lines.append(
            f"| {r.gpus:,} | {r.topology} | {r.big_job.split(' ')[0]} | {r.fill_allocated:.0%} | {r.model_memory_mb}"
            f" | {r.place_ms} / {r.place_p90_ms} | {r.place_wall_ms} | {r.release_ms} | {r.infeasible_ms}"
            f" | {r.failure_full_ms}"
            f" | {r.failure_minimal_ms} | {r.big_cost_ms} | {'yes' if r.proven_optimal else 'no'} |"
        )
    return "\n".join(lines)


def command(args: argparse.Namespace) -> int:
    if args.what == "operator":
        # The operator benchmarks are dev tools (paralleljob.devtools): they need the local control plane.
        from paralleljob.devtools.bench_operator import run_benchmark

        measured = run_benchmark(
            nodes=args.operator_nodes,
            jobs=args.jobs,
            repeats=min(args.repeat, 5),
            rounds=args.rounds,
            kube_scheduler=not args.no_kube_scheduler,
            out=None,
            crashes=args.crashes,
        )
        text = json.dumps(measured, indent=2, sort_keys=True)
        print(text)
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(text)
        return 0
    if args.what == "dra":
        from paralleljob.devtools.bench_dra import run_dra_benchmark

        measured = run_dra_benchmark(
            args.dra_nodes, args.repeat, args.dra_wave_gangs, args.burst_pods, args.dra_nvl72_racks
        )
        return _emit(measured, args.json)
    if args.what == "worker-crash":
        from paralleljob.devtools.bench_crash import run_worker_crash

        return _emit(run_worker_crash(crashes=args.crashes, growths=args.repeat), args.json)
    if args.what == "dashboard":
        from paralleljob.devtools.bench_dashboard import run_dashboard_bench

        measured = run_dashboard_bench(
            args.dashboard_nodes, args.dashboard_jobs, min(args.repeat, 5), reuse=args.dashboard_cluster
        )
        return _emit(measured, args.json)
    if args.what == "jobs":
        from paralleljob.devtools.bench_jobs import run_jobs

        return _emit(run_jobs(args), args.json)
    if args.what == "scale":
        from paralleljob.devtools.bench_scale import run_scale

        sizes = [int(n) for n in args.scale_nodes.split(",")]
        return _emit(run_scale(sizes, args), args.json)
    if args.what == "native":
        from paralleljob.devtools.bench_native import run_native
        from paralleljob.devtools.native_report import table

        sizes = [int(n) for n in args.native_nodes.split(",")]
        measured = run_native(sizes, args.gangs, args.seed)
        print(table(measured))  # the table docs/benchmarks.md shows; every figure behind it goes to --json
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(json.dumps(measured, indent=2, sort_keys=True))
        return 0
    if args.what == "kueue" and args.kueue_parts != "placement":
        from paralleljob.devtools.bench_kueue_parts import run_parts
        from paralleljob.devtools.flow_report import repair_table
        from paralleljob.devtools.flow_report import table as flow_table

        measured = run_parts(args, set(args.kueue_parts.split(",")))
        if "ceiling" in measured:
            print(flow_table(measured))
        if "bursts" in measured:
            from paralleljob.devtools.bench_burst import table as burst_table

            print(burst_table(measured["bursts"], measured.get("bursts_against_ceiling", {})))
        if "repair" in measured:
            print(repair_table(measured["repair"]))
        return _emit(measured, args.json)
    if args.what == "kueue" and args.kueue_nvl72:
        from paralleljob.devtools.bench_kueue_nvl72 import run_kueue_nvl72
        from paralleljob.devtools.kueue_nvl72_report import table as nvl72_table

        measured = run_kueue_nvl72(args.kueue_nvl72, args.gangs, args.kueue_big_gangs, args.seed)
        print(nvl72_table(measured))  # per gang; the comparison and every figure go to --json
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(json.dumps(measured, indent=2, sort_keys=True))
        return 0
    if args.what == "kueue":
        from paralleljob.devtools.bench_kueue import run_kueue
        from paralleljob.devtools.kueue_report import table as kueue_table

        measured = run_kueue(args.kueue_nodes, args.gangs, args.kueue_big_gangs, args.seed, args.kueue_background)
        print(kueue_table(measured))  # per gang; the comparison and every figure go to --json
        if args.json:
            with open(args.json, "w") as fh:
                fh.write(json.dumps(measured, indent=2, sort_keys=True))
        return 0
    if args.what == "nvl72":
        from paralleljob.nvlbench import run_nvl72

        return _emit(run_nvl72(args.racks, args.repeat, args.seed, args.spares), args.json)
    if args.what == "chaos":
        from paralleljob.chaosrun.bench import run_chaos_bench

        return _emit(run_chaos_bench(seed=args.seed, kills=args.kills, nodes=args.chaos_nodes), args.json)
    if args.what == "quality":
        print(
            "| nodes | instances | placer = MILP optimum | MILP proven | worst gap % | mean gap %"
            " | placer ms | MILP s |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for nodes in (int(x) for x in args.nodes.split(",")):
            r = quality(nodes, args.instances, args.seed, args.time_limit)
            print(
                f"| {r.nodes} | {r.instances} | {r.equal} | {r.milp_proven} | {r.worst_gap_pct} | {r.mean_gap_pct}"
                f" | {r.placer_ms_median} | {r.milp_s_median} |",
                flush=True,
            )
        return 0
    results = []
    # The header once, then each row as soon as it is measured (a 100k row takes a while): one table,
    # not the rows as progress and then the whole table again.
    print(render([]), flush=True)
    for gpus in (int(x) for x in args.sizes.split(",")):
        for topology in args.topology.split(","):
            results.append(run(gpus, topology, args.repeat, args.seed))
            print(render(results[-1:]).splitlines()[-1], flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in results], fh, indent=2, sort_keys=True)
    return 0


def _emit(measured: dict[str, Any], json_path: str | None) -> int:
    text = json.dumps(measured, indent=2, sort_keys=True)
    print(text)
    if json_path:
        with open(json_path, "w") as fh:
            fh.write(text)
    return 0


BENCHMARKS = (
    "placement",
    "quality",
    "operator",
    "worker-crash",
    "chaos",
    "scale",
    "dra",
    "native",
    "kueue",
    "dashboard",
    "nvl72",
    "jobs",
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help=f"run a benchmark ({', '.join(BENCHMARKS)})")
    parser.add_argument(
        "what",
        choices=BENCHMARKS,
        help="which benchmark",
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="cluster sizes in GPUs, comma-separated")
    parser.add_argument("--topology", default="flat,tree", help="flat (node/cluster) and/or tree (rack/spine)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the results as JSON here")
    parser.add_argument("--nodes", default="8,16,32,64", help="quality: cluster sizes in nodes")
    parser.add_argument("--instances", type=int, default=20, help="quality: instances per size")
    parser.add_argument("--time-limit", type=float, default=120.0, help="quality: MILP time limit (s)")
    parser.add_argument("--operator-nodes", type=int, default=32, help="operator: fake GPU nodes")
    parser.add_argument("--jobs", type=int, default=32, help="operator: jobs in the throughput stream")
    parser.add_argument("--rounds", type=int, default=3, help="operator: throughput rounds per contender")
    parser.add_argument("--no-kube-scheduler", action="store_true", help="operator: skip the kube-scheduler run")
    parser.add_argument("--crashes", type=int, default=20, help="operator, worker-crash: worker crashes")
    parser.add_argument("--dra-nodes", type=int, default=8, help="dra: fake 8-GPU nodes per mode (at least 8)")
    parser.add_argument(
        "--dra-wave-gangs",
        type=int,
        default=0,
        help="dra: also repair a node 1 s into a wave of this many gangs of --burst-pods one-GPU pods, per round",
    )
    parser.add_argument(
        "--dra-nvl72-racks",
        type=int,
        default=0,
        help="dra: that many GB200 NVL72 racks beside the nodes, and a tray repair per round (idle and in a wave)",
    )
    parser.add_argument("--kills", type=int, default=100, help="chaos: operator SIGKILLs in the long run")
    parser.add_argument("--chaos-nodes", type=int, default=24, help="chaos: fake GPU nodes")
    parser.add_argument("--jobs-nodes", type=int, default=200, help="jobs: kwok nodes (8 GPUs each)")
    parser.add_argument("--queues", type=int, default=1000, help="jobs: ParallelJobQueues")
    parser.add_argument("--flood-jobs", type=int, default=50_000, help="jobs: ParallelJobs in the flood")
    parser.add_argument("--creators", type=int, default=32, help="jobs: concurrent create calls")
    parser.add_argument("--run-min", type=float, default=10.0, help="jobs: shortest run time (s)")
    parser.add_argument("--run-max", type=float, default=60.0, help="jobs: longest run time (s)")
    parser.add_argument("--room-jobs", type=int, default=50, help="jobs: one-by-one jobs timed with room")
    parser.add_argument("--busy-waiting", type=int, default=10_000, help="jobs: pass times while this many wait")
    parser.add_argument(
        "--ttl-after-finished",
        type=int,
        metavar="SECONDS",
        help="jobs: set spec.ttlSecondsAfterFinished on the flood's jobs (default: not set, finished jobs stay)",
    )
    parser.add_argument("--drain-timeout", type=float, default=7200.0, help="jobs: give up draining after (s)")
    parser.add_argument("--scale-nodes", default="500,2000", help="scale: kwok node counts, comma-separated")
    parser.add_argument("--native-nodes", default="500,2000", help="native: kwok node counts, comma-separated")
    parser.add_argument("--gangs", type=int, default=24, help="native, kueue: gangs of the mixed LLM set")
    add_kueue_arguments(parser)
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="scale: idle window per size")
    parser.add_argument("--dashboard-nodes", type=int, default=12500, help="dashboard: kwok nodes (8 GPUs each)")
    parser.add_argument("--dashboard-jobs", type=int, default=40, help="dashboard: jobs placed before measuring")
    parser.add_argument("--dashboard-cluster", help="dashboard: measure on this running dev cluster (kept)")
    parser.add_argument("--racks", type=int, default=1389, help="nvl72: GB200 NVL72 racks (72 GPUs each)")
    parser.add_argument("--spares", type=int, default=0, help="nvl72: warm spare trays per clique")
    parser.set_defaults(handler=command)


# ---- quality against an exact MILP ---------------------------------------------------------------------
@dataclass
class QualityRow:
    nodes: int
    instances: int
    equal: int
    milp_proven: int
    worst_gap_pct: float
    mean_gap_pct: float
    placer_ms_median: float
    milp_s_median: float


def quality_instance(rng: random.Random, nodes: int) -> tuple[ClusterState, JobSpec]:
    """A partly used rack/spine cluster (random jobs, a few failed GPUs) and a random seed-model job."""
    from paralleljob.core import ModelShape

    topo = Topology.uniform(nodes, 8, levels=[("rack", 4, 200.0), ("spine", 16, 100.0)])
    state = ClusterState(topo)
    placer, model = Placer(state), cost_model("seed")
    target = rng.uniform(0.2, 0.6) * topo.num_gpus
    used, n = 0, 0
    while used < target and n < 1000:
        job = JobSpec(f"bg-{n}", rng.choice([1, 2, 4]), 1, rng.choice([1, 2, 3]), 10.0)
        n += 1
        try:
            placement = placer.place(job, model)
        except PlacementInfeasible:
            continue
        state.allocate(Allocation(job.job_id, placement.groups, 10.0))
        used += job.num_gpus
    for gpu in rng.sample(range(topo.num_gpus), topo.num_gpus // 30):
        if state.owner[gpu] is None:
            state.set_health(gpu, GPUHealth.OFFLINE)
    while True:
        tp, pp, dp = rng.choice([1, 2, 4, 8]), rng.randint(1, 4), rng.randint(1, 6)
        if pp * dp <= 16:
            break
    shape = ModelShape(
        num_params_billions=rng.choice([0.05, 0.5, 7.0, 70.0]),
        seq_len=rng.choice([2048, 8192]),
        micro_batch_size=rng.choice([1, 4]),
    )
    return state, JobSpec("job", tp, pp, dp, 40.0, shape)


def quality(nodes: int, instances: int, seed: int, time_limit_s: float) -> QualityRow:
    from paralleljob.milp import solve

    rng = random.Random(seed)
    model = cost_model("seed")
    gaps: list[float] = []
    placer_ms: list[float] = []
    milp_s: list[float] = []
    equal = proven = 0
    while len(gaps) < instances:
        state, job = quality_instance(rng, nodes)
        start = time.perf_counter()
        try:
            placement = Placer(state).place(job, model)
        except PlacementInfeasible:
            continue
        placer_ms.append((time.perf_counter() - start) * 1e3)
        result = solve(state, job, time_limit_s)
        milp_s.append(result.seconds)
        if result.cost_ms is None:
            continue
        proven += result.optimal
        reference = result.cost_ms if result.optimal else (result.bound_ms or result.cost_ms)
        gap = max(0.0, placement.cost.total_ms - reference) / max(reference, 1e-12) * 100
        equal += gap <= 1e-6
        gaps.append(gap)
    return QualityRow(
        nodes,
        len(gaps),
        equal,
        proven,
        round(max(gaps), 4),
        round(statistics.mean(gaps), 4),
        round(statistics.median(placer_ms), 2),
        round(statistics.median(milp_s), 2),
    )

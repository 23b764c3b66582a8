"""``paralleljob bench kueue --kueue-parts ceiling,throughput,repair``: issue 41's ceiling, end-to-end
drains and node repair, measured in one run on one dev cluster (kwok nodes, JobSet, Kueue, the stock
kube-scheduler, the operator).

In order: the ceiling (``bench_ceiling``: a raw client's pod create + bind, and + status, with no
scheduler in the loop); the queues both sides drain through (``bench_flow``: ClusterQueues in cohorts with
their LocalQueues, and ParallelJobQueues of the same names); Kueue's drain and ours of the same jobs, in
the order ``--flow-first`` says, each on an emptied cluster (``--flow-sides`` drains one side only; an
ours-only run without the repair brings up neither Kueue, JobSet nor kube-scheduler); then the repair
samples (``bench_kueue_repair``). With ``--flow-clusters fresh`` each side drains on a cluster of its own
instead, brought up for it with only that side's controllers (``cluster_stages``): no side inherits the
other's history, and no backlog is deleted between them. Every drain is also a share of the ceiling, and
its progress series (``--json``'s path + ``.progress-<side>.jsonl``, written as it goes) is printed in
windows (``flow_report``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paralleljob.devcluster.cluster import DevCluster, down, up
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devtools import bench_burst, bench_flow
from paralleljob.devtools.bench_ceiling import ceiling
from paralleljob.devtools.bench_identity import queued_operator_kubeconfig
from paralleljob.devtools.bench_kueue import NODES_PER_RACK
from paralleljob.devtools.bench_kueue_repair import repair
from paralleljob.devtools.flow_report import against_ceiling, capacity_floor_s, progress_table
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.k8s.edge.config import DEFAULT_WRITE_CONCURRENCY
from paralleljob.k8s.edge.constants import GROUP, QUEUE_PLURAL, VERSION
from paralleljob.k8s.runtime.api import ApiError, Kube

PARTS = ("placement", "ceiling", "burst", "throughput", "repair")
SIDE_PARTS = frozenset({"burst", "throughput"})  # measured once for each side


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def drain_order(first: str, sides: str) -> tuple[str, ...]:
    """The sides that drain, in order: both (``--flow-first`` first) or the one ``--flow-sides`` names."""
    order = ("kueue", "ours") if first == "kueue" else ("ours", "kueue")
    return order if sides == "both" else (sides,)


def controllers_needed(parts: set[str], sides: str) -> tuple[str, ...]:
    """JobSet and Kueue for the repair or a Kueue burst or drain; none when only ours is measured."""
    return ("jobset", "kueue") if "repair" in parts or (SIDE_PARTS & parts and sides != "ours") else ()


@dataclass(frozen=True)
class Stage:
    """What one dev cluster measures: its parts, the sides that drain on it in order, its add-ons, and
    whether the operator runs (always on a shared cluster: the idle side watches as it would in one)."""

    parts: frozenset[str]
    order: tuple[str, ...]
    controllers: tuple[str, ...]
    operator: bool


def cluster_stages(parts: set[str], order: tuple[str, ...], fresh: bool) -> list[Stage]:
    """One cluster for everything, or (``fresh``) one per side for its burst and drain, the ceiling on the
    first and the repair, which needs both sides, on one more."""
    sides = "both" if len(order) > 1 else order[0]
    if not fresh or not SIDE_PARTS & parts or len(order) < 2:
        return [Stage(frozenset(parts), order, controllers_needed(parts, sides), operator=True)]
    stages = []
    for i, who in enumerate(order):
        own = set(SIDE_PARTS & parts)
        controllers = controllers_needed(own, who)
        own |= {"ceiling"} & parts if i == 0 else set()
        stages.append(Stage(frozenset(own), (who,), controllers, operator=who == "ours"))
    if "repair" in parts:
        stages.append(Stage(frozenset({"repair"}), (), controllers_needed({"repair"}, sides), operator=True))
    return stages


async def queues(kube: Kube, count: int, gpus: int, with_kueue: bool = True) -> None:
    for path, body in bench_flow.flow_kueue_objects(count, gpus) if with_kueue else []:
        await kube.request("POST", path, body)
    for i in range(count):
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ParallelJobQueue",
            "metadata": {"name": bench_flow.queue_name(i)},
        }
        with contextlib.suppress(ApiError):
            await kube.request("POST", f"/apis/{GROUP}/{VERSION}/{QUEUE_PLURAL}", body)


async def measure(cluster: DevCluster, args: Any, stage: Stage, drained: dict[str, Any]) -> dict[str, Any]:
    """The stage's parts on ``cluster``; ``drained``: the drains of the stages before (a race's yardstick)."""
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-kueue-flow-"))
    kube = await Kube.connect(str(cluster.kubeconfig), concurrency=max(48, args.ceiling_concurrency, args.creators))
    operator_kubeconfig = await queued_operator_kubeconfig(kube, cluster)
    operator = OperatorProcess(operator_kubeconfig, workdir, identity="bench-kueue-flow", log_level="WARNING",
                               log_name="{identity}-{start}.log",
                               extra_args=("--write-concurrency", str(args.operator_write_concurrency)))  # fmt: skip
    if stage.operator:
        operator.start()
    out: dict[str, Any] = {"load_average_start": load_average()}
    parts, order = stage.parts, stage.order
    try:
        for namespace in (bench_flow.KUEUE_NAMESPACE, bench_flow.OURS_NAMESPACE):
            with contextlib.suppress(ApiError):
                await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        if stage.operator:
            await operator.wait_metric("paralleljob_reconcile_passes_total", 1.0)
        if "ceiling" in parts:
            out["ceiling"] = await ceiling(kube, args.ceiling_pods, args.ceiling_concurrency, args.ceiling_rounds)
            _say(f"ceiling: {out['ceiling']}; load {load_average()}")
        if "burst" in parts:
            out["bursts"] = await _bursts(kube, cluster, args, stage, operator)
        if "throughput" in parts:
            await queues(kube, args.flow_queues, args.kueue_nodes * 8, with_kueue="kueue" in order)
            jobs = bench_flow.shapes(
                args.flow_jobs, args.flow_queues, (args.flow_run_min, args.flow_run_max), args.seed
            )
            pids = bench_flow.controller_pids(cluster.name, operator.proc.pid if operator.proc else None)
            out["drains"] = {}
            for who in order:
                if stage.operator:
                    operator.ensure_running()
                if operator.proc is not None:
                    pids["operator"] = operator.proc.pid  # a new instance if it was stopped for a clear
                series = Path(f"{args.json}.progress-{who}.jsonl") if args.json else workdir / f"progress-{who}.jsonl"
                _say(f"{who}: progress series in {series}")
                drains = out["drains"][who] = await bench_flow.drain(
                    kube,
                    cluster.kubeconfig,
                    pids,
                    who,
                    jobs,
                    args.creators,
                    args.drain_timeout,
                    operator if stage.operator else None,
                    series,
                    restart=(lambda: _restarted(operator)) if stage.operator else None,
                    race_s=_race_limit(args, {**drained, **out["drains"]}),
                )
                drains["load_average_after"] = load_average()
                drains["capacity_floor_s"] = capacity_floor_s(jobs, args.kueue_nodes * 8)
                summary = {k: v for k, v in drains.items() if k != "progress"}
                _say(f"{who}: {summary}")
                _say(progress_table(drains["progress"], step=10))
                if who != order[-1] or "repair" in parts:  # the cluster goes down after the last part anyway
                    if who == "ours":
                        # deleting a backlog takes a while, in which the operator would admit the jobs not yet
                        # deleted and make pods for them: stopped, the clear ran 7x as fast at 50,000 jobs
                        operator.stop()
                    await bench_flow.clear(kube, who)
        if "repair" in parts:
            operator.ensure_running()
            out["repair"] = await repair(
                kube, args.kueue_nodes, args.repair_samples, args.repair_wave_gangs, args.burst_pods
            )
            _say(f"repair: {out['repair']}")
        out["operator_starts"] = operator.starts
        out["load_average_end"] = load_average()
        return out
    finally:
        await kube.close()
        operator.stop()


async def _bursts(
    kube: Kube, cluster: DevCluster, args: Any, stage: Stage, operator: OperatorProcess
) -> dict[str, Any]:
    """Each side's wave of gangs in turn, the cluster emptied after each (the drains start on it empty)."""
    out: dict[str, Any] = {}
    for who in stage.order:
        pids = bench_flow.controller_pids(cluster.name, operator.proc.pid if operator.proc else None)
        out[who] = await bench_burst.burst(
            kube, cluster.kubeconfig, pids, who, args.burst_gangs, args.burst_pods, args.drain_timeout
        )
        out[who]["load_average_after"] = load_average()
        _say(f"burst {who}: {out[who]}")
        await bench_burst.clear(kube, who)
    return out


def _race_limit(args: Any, drained: dict[str, Any]) -> float | None:
    """With ``--flow-race``, a side that drains after another is stopped once it has run as long as that one
    took to finish every job (``--flow-race`` x its drain): by then which is faster is settled, and a slow
    side need not run for hours to say so."""
    if not args.flow_race or not drained:
        return None
    first = next(iter(drained.values()))
    if first["stopped_at_limit"]:
        return None  # the first side did not finish: no time to race against
    return float(first["drain_s"]) * float(args.flow_race)


def _restarted(operator: OperatorProcess) -> int | None:
    """The operator started again if it exited (its Deployment would): its new pid, else None."""
    if operator.running():
        return None
    _say(f"the operator exited ({operator.returncode}); starting it again, as its Deployment would")
    operator.start()
    return operator.proc.pid if operator.proc else None


def run_parts(args: Any, parts: set[str]) -> dict[str, Any]:
    order = drain_order(args.flow_first, args.flow_sides)
    stages = cluster_stages(parts, order, args.flow_clusters == "fresh")
    kueue_qps = args.kueue_qps
    result: dict[str, Any] = {"nodes": args.kueue_nodes, "gpus": args.kueue_nodes * 8, "drains": {}, "bursts": {}}
    up_s: list[float] = []
    for i, stage in enumerate(stages):
        name = f"kueue-flow-{os.getpid()}" + (f"-{i + 1}" if len(stages) > 1 else "")
        shape = NodeShape(count=args.kueue_nodes, gpus_per_node=8, nodes_per_rack=NODES_PER_RACK)
        started = time.monotonic()
        cluster = up(
            name, shape, die_with_caller=True, controllers=stage.controllers, kueue_qps=kueue_qps,
            pod_gc_threshold=args.pod_gc_threshold,
        )  # fmt: skip
        up_s.append(round(time.monotonic() - started, 1))
        try:
            measured = asyncio.run(measure(cluster, args, stage, result["drains"]))
        finally:
            down(name)
        result["drains"].update(measured.pop("drains", {}))
        result["bursts"].update(measured.pop("bursts", {}))
        result.setdefault("load_average_start", measured.pop("load_average_start"))  # the first cluster's
        result["operator_starts"] = result.get("operator_starts", 0) + measured.pop("operator_starts")
        result.update(measured)  # the ceiling, the repair, the last load average
    if result["bursts"] and "ceiling" in result:
        result["bursts_against_ceiling"] = bench_burst.against_ceiling(result["ceiling"], result["bursts"])
    if not result["bursts"]:
        del result["bursts"]
    if not result["drains"]:
        del result["drains"]
    elif "ceiling" in result:
        result["against_ceiling"] = against_ceiling(result["ceiling"], result["drains"])
    result["clusters"] = "one per side" if len(stages) > 1 else "one"
    result["cluster_up_s"] = up_s[0] if len(up_s) == 1 else up_s
    result["kueue_client"] = {"qps": kueue_qps, "burst": 2 * kueue_qps} if kueue_qps else "shipped (50/100)"
    result["pod_gc_threshold"] = args.pod_gc_threshold  # 0: no pod GC
    result["command"] = (
        f"paralleljob bench kueue --kueue-parts {','.join(sorted(parts))} --kueue-nodes {args.kueue_nodes}"
        f" --ceiling-pods {args.ceiling_pods} --ceiling-concurrency {args.ceiling_concurrency}"
        f" --ceiling-rounds {args.ceiling_rounds}"
        f" --burst-gangs {args.burst_gangs} --burst-pods {args.burst_pods}"
        f" --flow-jobs {args.flow_jobs} --flow-queues {args.flow_queues} --creators {args.creators}"
        f" --flow-run-min {args.flow_run_min} --flow-run-max {args.flow_run_max} --repair-samples"
        f" {args.repair_samples} --flow-first {args.flow_first} --flow-sides {args.flow_sides}"
        f" --drain-timeout {args.drain_timeout:g} --seed {args.seed}"
        + (f" --kueue-qps {kueue_qps}" if kueue_qps else "")
        + (f" --pod-gc-threshold {args.pod_gc_threshold}" if args.pod_gc_threshold else "")
        + (f" --flow-race {args.flow_race:g}" if args.flow_race else "")
        + (" --flow-clusters fresh" if args.flow_clusters == "fresh" else "")
        + (f" --repair-wave-gangs {args.repair_wave_gangs}" if args.repair_wave_gangs else "")
        + (
            f" --operator-write-concurrency {args.operator_write_concurrency}"
            if args.operator_write_concurrency != DEFAULT_WRITE_CONCURRENCY
            else ""
        )
    )
    return result

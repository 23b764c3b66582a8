"""`paralleljob demo`: the placement core in one screen, no cluster needed.

A small two-rack cluster, a few jobs of different shapes (one that must wait), the cost of each placement
against the obvious alternative, then a GPU failure repaired minimally and a node failure repaired in full.
"""

from __future__ import annotations

import argparse
import string
from typing import Any

from paralleljob import ClusterTopology, GPUClusterScheduler, Job

JOBS = [
    Job("llama-70b", 4, 2, 2, 70.0),
    Job("llama-7b", 2, 1, 4, 30.0, num_params_billions=7.0),
    Job("mixtral", 8, 2, 1, 60.0, num_params_billions=47.0),
    Job("bert-sweep", 1, 1, 6, 12.0, num_params_billions=0.3),
    Job("gpt-175b", 8, 4, 2, 75.0, num_params_billions=175.0),  # 64 GPUs: more than is free
]


def gpu_map(scheduler: GPUClusterScheduler) -> str:
    """One row per node: a letter per GPU for the job on it, '.' free, 'x' failed."""
    letters = {job_id: string.ascii_uppercase[i] for i, job_id in enumerate(sorted(scheduler.list_jobs()))}
    owner = {}
    for job_id, placement in scheduler.list_jobs().items():
        for group in placement["tp_groups"]:
            for gpu in group:
                owner[gpu] = letters[job_id]
    per_node = scheduler.topology.gpus_per_node
    rows = []
    for node in range(scheduler.topology.num_nodes):
        cells = []
        for gpu in range(node * per_node, (node + 1) * per_node):
            cells.append("x" if not scheduler.gpus[gpu].is_healthy else owner.get(gpu, "."))
        rack = node // 4
        rows.append(f"  rack {rack} node {node}: {' '.join(cells)}")
    legend = ", ".join(f"{letter}={job_id}" for job_id, letter in letters.items())
    return "\n".join([*rows, f"  ({legend}; . free, x failed)"])


def show_cost(label: str, cost: dict[str, Any]) -> str:
    return (
        f"{label}: total {cost['total_ms']:.1f} ms (TP {cost['tp_time_ms']:.2f}, PP {cost['pp_time_ms']:.2f},"
        f" DP {cost['dp_time_ms']:.1f}; bottleneck {cost['bottleneck']})"
    )


def run(args: argparse.Namespace) -> int:
    topology = ClusterTopology(num_nodes=8, levels=[("rack", 4, 200.0)])
    scheduler = GPUClusterScheduler(topology, cost_model=args.cost_model, recovery="minimal")
    print(f"Cluster: 8 nodes x 8 GPUs in 2 racks; NVLink 600 GB/s, rack 200 GB/s, spine 50 GB/s; "
          f"cost model {args.cost_model}\n")
    for job in JOBS:
        placement = scheduler.place_job(job)
        shape = f"TP{job.tensor_parallel_size}xPP{job.pipeline_parallel_size}xDP{job.data_parallel_size}"
        if placement is None:
            reasons = scheduler.last_refusal.reasons if scheduler.last_refusal else ()
            print(f"- {job.job_id} {shape}: waits -- " + "; ".join(reasons))
            continue
        print(f"- {job.job_id} {shape}: TP groups {placement['tp_groups']}")
        print("    " + show_cost("placed", scheduler.estimate_communication_cost(job, placement)))
        print("    decision: " + " | ".join(scheduler.explain(job.job_id)))
    print("\nGPU map:\n" + gpu_map(scheduler))

    victim = scheduler.list_jobs()["llama-70b"]["tp_groups"][0][1]
    print(f"\nGPU {victim} fails (XID 79, fell off the bus): minimal repair")
    for action in scheduler.handle_gpu_failure(victim):
        after = action["cost_after_ms"]
        after_text = "none (killed)" if after is None else f"{after:.1f} ms"
        print(f"- {action['job_id']}: {action['action']}; cost {action['cost_before_ms']:.1f} ms -> {after_text}")
        for reason in action["reasons"]:
            if "minimal" in reason or "->" in reason:
                print("    " + reason)
    node = scheduler.list_jobs()["mixtral"]["tp_groups"][0][0] // topology.gpus_per_node
    scheduler.recovery = type(scheduler.recovery)("full")
    print(f"\nNode {node} goes NotReady: every GPU on it fails; full re-placement")
    for gpu in range(node * topology.gpus_per_node, (node + 1) * topology.gpus_per_node):
        for action in scheduler.handle_gpu_failure(gpu):
            after = action["cost_after_ms"]
            print(f"- {action['job_id']}: {action['action']}"
                  + ("" if after is None else f"; cost {action['cost_before_ms']:.1f} -> {after:.1f} ms"))
    print("\nGPU map after the failures:\n" + gpu_map(scheduler))
    waiting = JOBS[-1]
    print(f"\n{waiting.job_id} still waits: ", end="")
    print("placed" if scheduler.place_job(waiting) else "; ".join(scheduler.last_refusal.reasons))  # type: ignore[union-attr]
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="show the placement core on a small simulated cluster")
    parser.add_argument("--cost-model", default="seed", choices=["seed", "megatron"])
    parser.set_defaults(handler=run)

"""How much cheaper than our placement the mixed LLM set of ``bench native`` could be placed at all: each gang
placed alone by the core placer on the benchmark's half-full cluster (the same nodes, background and gangs as
``bench native``, no API server), next to the placer's lower bound on an *empty* copy of the cluster (the
cheapest any placement of that shape could be on this topology). Where ours equals that bound, no scheduler
can do better on our cost model, and the saving against kube-scheduler is as large as it can be.

``python -m paralleljob.devtools.native_headroom 500 [--gangs 24] [--seed 1]``; a table in Markdown.
"""

from __future__ import annotations

import argparse

from paralleljob.core import Allocation, ClusterState, JobSpec, Placer, cost_model
from paralleljob.devcluster.nodes import NodeShape, gpu_node_manifest
from paralleljob.devtools.native_set import background, llm_set
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.view.clusterview import build_view

NODES_PER_RACK = 32  # bench_native's


def headroom(nodes: int, gang_count: int, seed: int) -> list[tuple[str, str, float, float]]:
    """(shape, cost model, our cost, lower bound on the empty cluster) per gang, in ms per step."""
    shape = NodeShape(count=nodes, gpus_per_node=8, nodes_per_rack=NODES_PER_RACK)
    config = TopologyConfig()
    bodies = [gpu_node_manifest(shape, i) for i in range(nodes)]
    view = build_view([parse_node(b, config) for b in bodies], [], [], config)
    assert view.topology is not None
    topology = view.topology
    state = ClusterState(topology)
    for index, busy in background(nodes, NODES_PER_RACK, 0.5, seed).items():
        first = topology.node_first_gpu[topology.node_index(bodies[index]["metadata"]["name"])]
        state.allocate(Allocation(f"bg-{index}", (tuple(range(first, first + busy)),), 10.0))
    empty = Placer(ClusterState(topology))
    out = []
    for gang in llm_set(gang_count, NODES_PER_RACK * 8, seed):
        job, model = JobSpec(gang.name, gang.tp, gang.pp, gang.dp, 10.0), cost_model(gang.cost_model)
        ours = Placer(state).place(job, model).cost.total_ms
        out.append((gang.shape, gang.cost_model, ours, empty.lower_bound(job, model)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("--gangs", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = headroom(args.nodes, args.gangs, args.seed)
    print("| shape | model | ours ms | lower bound ms |\n|---|---|---|---|")
    for shape, model, ours, bound in rows:
        print(f"| {shape} | {model} | {ours:,.1f} | {bound:,.1f} |")
    above = sum(1 for _, _, ours, bound in rows if ours > bound + 1e-6)
    mean_ours = sum(ours for _, _, ours, _ in rows) / len(rows)
    mean_bound = sum(bound for _, _, _, bound in rows) / len(rows)
    print(f"\nmean: ours {mean_ours:,.1f} ms, lower bound {mean_bound:,.1f} ms;", end=" ")
    print(f"above the bound on {above} of {len(rows)}")


if __name__ == "__main__":
    main()

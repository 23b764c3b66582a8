"""Simulated clusters: a uniform one from a node count, or one read from a node-list CSV.

``levels`` uses the CLI's syntax, ``name:nodes_per_domain:bandwidth_gbps`` joined by commas, bottom-up
between the node and the cluster (e.g. ``rack:32:50,spine:512:25``). A node list can be sampled down to a
seeded random subset that keeps the file order, to size a real cluster's node mix to a trace's load.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from paralleljob.core.topology import Level, NodeSpec, Topology
from paralleljob.sim.workload.alibaba import read_node_list


def parse_levels(text: str) -> list[tuple[str, int, float]]:
    levels = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            name, size, bandwidth = part.split(":")
            levels.append((name, int(size), float(bandwidth)))
        except ValueError:
            raise ValueError(f"bad level {part!r}: use name:nodes_per_domain:bandwidth_gbps") from None
    return levels


def oversubscribed(levels: str, ratio: float) -> str:
    """``levels`` with every level above the lowest one (the leaf / rack switch) divided by ``ratio``: a spine
    oversubscribed R:1 gives each GPU 1/R of the bandwidth it has inside its leaf. The cluster level on top
    is divided by the caller (it is not in ``levels``). Empty ``levels`` with a ratio is an error."""
    if not math.isfinite(ratio) or ratio < 1.0:
        raise ValueError(f"--oversubscription must be a number >= 1, got {ratio}")
    parsed = parse_levels(levels)
    if ratio == 1.0:
        return levels
    if not parsed:
        raise ValueError("--oversubscription needs --levels: there is no level above a leaf switch to divide")
    out = [parsed[0], *((name, size, bw / ratio) for name, size, bw in parsed[1:])]
    return ",".join(f"{name}:{size}:{bw!r}" for name, size, bw in out)


def uniform_cluster(
    nodes: int, gpus_per_node: int = 8, levels: str = "", intra_node_bw: float = 600.0, inter_node_bw: float = 50.0
) -> Topology:
    return Topology.uniform(
        nodes, gpus_per_node, intra_node_bw_gbps=intra_node_bw, levels=parse_levels(levels),
        inter_node_bw_gbps=inter_node_bw,
    )


def mixed_node_cluster(
    nodes: tuple[tuple[int, int], ...] = ((8, 6), (4, 6), (2, 8)), intra_node_bw: float = 600.0,
    inter_node_bw: float = 50.0,
) -> Topology:  # fmt: skip
    """One network level over nodes of several sizes, ``(gpus per node, nodes)`` each: by default 88 GPUs on
    six nodes of 8, six of 4 and eight of 2, the small-node cluster of issue 43."""
    specs = [NodeSpec(f"n{gpus}-{i}", gpus, domains=("cluster",)) for gpus, count in nodes for i in range(count)]
    return Topology.from_nodes(specs, [Level("node", intra_node_bw), Level("cluster", inter_node_bw)])


def node_list_cluster(
    path: Path, sample: int | None = None, seed: int = 0, intra_node_bw: float = 600.0, inter_node_bw: float = 50.0
) -> Topology:
    topology = read_node_list(path, intra_node_bw_gbps=intra_node_bw, inter_node_bw_gbps=inter_node_bw)
    if sample is None or sample >= topology.num_nodes:
        return topology
    if sample < 1:
        raise ValueError("--node-sample must be >= 1")
    keep = sorted(random.Random(f"{seed}:nodes").sample(range(topology.num_nodes), sample))
    specs = [
        NodeSpec(
            topology.node_names[n],
            topology.node_gpu_count[n],
            topology.node_gpu_memory_gb[n],
            tuple(topology.domain_names[level][topology.domain_of[level][n]] for level in range(1, topology.top + 1)),
        )
        for n in keep
    ]
    return Topology.from_nodes(specs, topology.levels)


def describe(topology: Topology) -> dict[str, Any]:
    sizes: dict[str, int] = {}
    for count in topology.node_gpu_count:
        sizes[str(count)] = sizes.get(str(count), 0) + 1
    return {
        "nodes": topology.num_nodes,
        "gpus": topology.num_gpus,
        "nodes_by_gpu_count": dict(sorted(sizes.items(), key=lambda kv: int(kv[0]))),
        "levels": [f"{level.name}@{level.bandwidth_gbps:g}GB/s" for level in topology.levels],
    }

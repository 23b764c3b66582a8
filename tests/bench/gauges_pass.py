"""Time the gauges a reconcile pass computes (``plan.metrics_model.gauges``) on a cluster shared with pods of
other schedulers, each of which the view holds GPUs for under a holder of its own.

    python -m tests.bench.gauges_pass NODES PODS

NODES 8-GPU nodes (32 per leaf, 512 per spine), PODS one-GPU pods bound round-robin over them that no
ParallelJob record explains; prints the number of assumed holders and the medians of 21 calls of the
gauges and of the parts that read holders or domains. Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.plan.metrics_model import fragmentation_ratio, gauges, level_use
from paralleljob.k8s.plan.slices.book import sliced_gpus
from paralleljob.k8s.plan.slices.mpsbook import mps_gpus
from paralleljob.k8s.view.clusterview import build_view
from tests.k8s.factories import foreign_pod, node


def median_ms(call: Callable[..., Any], *args: Any, repeats: int = 21) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call(*args)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main(argv: list[str]) -> None:
    n_nodes, n_pods = int(argv[0]), int(argv[1])
    config = TopologyConfig()
    nodes = [
        parse_node(node(f"n{i:05d}", leaf=f"leaf-{i // 32:03d}", spine=f"spine-{i // 512:02d}"), config)
        for i in range(n_nodes)
    ]
    pods = [parse_pod(foreign_pod(f"web-{i}", f"n{i % n_nodes:05d}", 1)) for i in range(n_pods)]
    view = build_view(nodes, pods, [], config)
    print(
        f"nodes={n_nodes} pods={n_pods} holders={len(view.state.assumed)}:"
        f" gauges {median_ms(gauges, view, [], {}):.2f} ms (level use {median_ms(level_use, view):.2f},"
        f" fragmentation {median_ms(fragmentation_ratio, view):.2f}, sliced GPUs {median_ms(sliced_gpus, view):.2f},"
        f" MPS GPUs {median_ms(mps_gpus, view):.2f})"
    )


if __name__ == "__main__":
    main(sys.argv[1:])

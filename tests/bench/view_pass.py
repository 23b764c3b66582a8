"""Time the cluster view a reconcile pass decides on: rebuilt every pass (before) vs kept and patched (after).

    python -m tests.bench.view_pass [NODES ...]      (default: 500 2000 12500)

Each size is a half-full cluster of 8-GPU nodes (32 per leaf, 512 per spine): TP8xPP2xDP8 jobs of 16 nodes,
each with its recorded placement (a claim) and its 16 bound workers, and one foreign 2-GPU pod on every
tenth free node. Per size it prints the median of 21 passes of: a rebuild from the stores (what every pass
did before), a kept view's refresh with nothing changed plus the pass's trial and rollback, the same with one
node's health changed, and with one foreign pod bound; then the GPU gauges every pass reads afterwards
(``counts()`` and the fragmentation ratio) as they were computed before (a scan of every GPU and node) and
now (kept totals, the cluster histogram). Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from paralleljob.core.cluster import ClusterState, GPUHealth
from paralleljob.k8s.plan.metrics_model import fragmentation_ratio
from paralleljob.k8s.view.clusterview import Claim, ClusterView, build_view
from paralleljob.k8s.view.liveview import LiveView
from tests.k8s.viewworld import World, claim, node_body, pod_body

REPEATS = 21
PODS_PER_JOB = 16


def _node(i: int, unhealthy: str | None = None) -> dict[str, Any]:
    body = node_body(f"n{i:05d}", 8, leaf=f"leaf-{i // 32:03d}", unhealthy=unhealthy)
    body["metadata"]["labels"]["network.topology.nvidia.com/spine"] = f"spine-{i // 512:02d}"
    return body


def _world(nodes: int) -> World:
    world = World()
    for i in range(nodes):
        world.put(world.nodes, _node(i))
    for j in range(nodes // 2 // PODS_PER_JOB):
        slots = [(f"j{j}-d{d}-p0", f"n{j * PODS_PER_JOB + d:05d}", tuple(range(8))) for d in range(PODS_PER_JOB)]
        world.claims[f"ns/j{j}"] = claim(f"j{j}", slots)
        for name, on, indices in slots:
            world.put(world.pods, pod_body(name, on, 8, job=f"j{j}", indices=indices))
    for i in range(nodes // 2, nodes, 10):
        world.put(world.pods, pod_body(f"web-{i}", f"n{i:05d}", 2))
    return world


def _median_ms(work: Callable[[int], object]) -> float:
    samples = []
    for round_ in range(REPEATS):
        started = time.perf_counter()
        work(round_)
        samples.append((time.perf_counter() - started) * 1e3)
    return statistics.median(samples)


def _pass(live: LiveView, claims: list[Claim]) -> ClusterView:
    view = live.refresh(claims)
    view.state.begin_trial()
    view.state.rollback()
    return view


def measure(nodes: int) -> dict[str, float]:
    world = _world(nodes)
    claims = world.claim_list()
    rebuild = _median_ms(lambda _: build_view(world.nodes.values(), world.pods.values(), claims, world.config))
    live = LiveView(world.config, world.nodes, world.pods)
    live.refresh(claims)
    idle = _median_ms(lambda _: _pass(live, claims))
    last = f"n{nodes - 1:05d}"
    sick = _median_ms(lambda r: (world.put(world.nodes, _node(nodes - 1, str(r % 8))), _pass(live, claims)))
    bound = _median_ms(lambda r: (world.put(world.pods, pod_body(f"new-{r}", last, 1)), _pass(live, claims)))
    assert set(live.rebuilds) == {"start"}, live.rebuilds  # every later pass was patched, none rebuilt
    view = live.refresh(claims)
    state = view.state
    scanned = _median_ms(lambda _: _scanned_gauges(state))
    kept = _median_ms(lambda _: (state.counts(), fragmentation_ratio(view)))
    return {"rebuild": rebuild, "idle": idle, "node": sick, "pod": bound, "scanned": scanned, "kept": kept}


def _scanned_gauges(state: ClusterState) -> tuple[int, int, int, int, float]:
    """The gauges as every pass computed them before: one look at every GPU and every node."""
    usable = [state.usable_free(n) for n in range(state.topology.num_nodes)]
    stranded = sum(u for n, u in enumerate(usable) if 0 < u < state.topology.node_gpu_count[n])
    return (
        sum(1 for h in state.health if h is not GPUHealth.HEALTHY),
        sum(1 for o in state.owner if o is not None),
        sum(usable),
        stranded,
        stranded / max(1, sum(usable)),
    )


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [500, 2000, 12500]
    print(
        f"{'nodes':>6} {'GPUs':>7} {'rebuild (before)':>17} {'kept, idle':>11} {'1 node':>8} {'1 pod':>8}"
        f" {'gauges before':>14} {'gauges now':>11}   (ms, medians)"
    )
    for nodes in sizes:
        r = measure(nodes)
        print(
            f"{nodes:>6} {nodes * 8:>7} {r['rebuild']:>17.2f} {r['idle']:>11.3f} {r['node']:>8.3f} {r['pod']:>8.3f}"
            f" {r['scanned']:>14.2f} {r['kept']:>11.3f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])

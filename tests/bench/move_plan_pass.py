"""Time the operator's pass that asks for a move plan (``k8s/plan/moves/roommaking``), as the FakeCluster runs it.

    python -m tests.bench.move_plan_pass [--repeat N] [NODES ...]      (default: 3 x 1024 4096 12500)

The cluster of ``tests.bench.move_plan`` (8-GPU nodes, 32 per leaf, 512 per spine, a 2-GPU job running on
every node, so 6 GPUs are free on each and no node is whole), built through the operator's own passes:
foreign pods take 6 GPUs of every node while the small jobs are admitted, so each lands on its own node,
then they go. A TP8 x DP32 job then arrives (32 whole nodes): the pass that refuses it asks
``core.moves.plan_moves``, moves the 32 small jobs of one leaf at once and admits it there. Per size it
prints the seconds of that pass (``FakeCluster.step``: the view, the decisions, the plan ask, the moves and
the admission, and applying the writes in memory) and of a pass with nothing new before it (what the ask
adds is the difference), fastest and median of N (each on a fresh copy of the settled cluster), as wall
time and as the process's CPU time (on a shared machine the wall time also counts others' time). The
planner is asked at most every 300 s per job, so this is the most one job's ask adds to a pass. Not collected
by pytest: a measurement, not a test.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from dataclasses import dataclass

from paralleljob.core.moves import MoveBounds
from paralleljob.k8s.edge.parse.queues import QueueInfo
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster

NODES_PER_LEAF = 32
NODES_PER_SPINE = 512
BIG = "ns/big"


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def empty(nodes: int) -> FakeCluster:
    bodies = [
        node(f"n{i:05d}", 8, leaf=f"leaf-{i // NODES_PER_LEAF:04d}", spine=f"spine-{i // NODES_PER_SPINE:03d}")
        for i in range(nodes)
    ]
    # a budget for the 32 moves of one leaf (the default queue's 20 per hour would refuse the plan)
    return FakeCluster(bodies, queues={"default": QueueInfo("default", moves=MoveBounds(max_moves_per_hour=100))})


def copied(base: FakeCluster) -> FakeCluster:
    """A fresh cluster with ``base``'s objects (the harness holds parsed values that do not deep-copy)."""
    fc = empty(len(base.nodes))
    fc.jobs, fc.pods = copy.deepcopy(base.jobs), copy.deepcopy(base.pods)
    return fc


def settled(nodes: int) -> FakeCluster:
    """The cluster with a 2-GPU job Running on every node and nothing else."""
    fc = empty(nodes)
    names = list(fc.nodes)
    for name in names:
        fc.pods[("other", f"f-{name}")] = foreign_pod(f"f-{name}", name, 6)
    for i in range(nodes):
        spec = {"checkpoint": {"intervalSeconds": 3600}}
        fc.add_job(paralleljob(f"s{i:05d}", 2, 1, 1, memory=10.0, created=at(0), extra_spec=spec))
    for t in range(4):
        fc.step(at(1 + t))
    running = sum(1 for key in fc.jobs if fc.phase(key) == "Running")
    if running != nodes:
        raise SystemExit(f"{nodes} nodes: {running} small jobs Running after settling, not {nodes}")
    for name in names:
        del fc.pods[("other", f"f-{name}")]
    fc.step(at(10))
    return fc


@dataclass
class Timed:
    wall_s: list[float]
    cpu_s: list[float]


def timed_pass(fc: FakeCluster, now: str, timing: Timed) -> None:
    started, started_cpu = time.perf_counter(), time.process_time()
    fc.step(now)
    timing.wall_s.append(time.perf_counter() - started)
    timing.cpu_s.append(time.process_time() - started_cpu)


def measure(nodes: int, repeat: int) -> str:
    base = settled(nodes)
    quiet, asking = Timed([], []), Timed([], [])
    plans = set()
    for _ in range(repeat):
        fc = copied(base)
        fc.step(at(200))  # the first pass of a fresh harness parses every object: not what is measured
        timed_pass(fc, at(300), quiet)
        fc.add_job(paralleljob("big", 8, 1, 32, memory=10.0, created=at(600)))
        timed_pass(fc, at(600), asking)
        planned = [e for e in fc.events if e[0] == BIG and e[1] == "MovePlanned"]
        if not planned:
            return f"{nodes} nodes: no plan ({fc.job(BIG).get('status', {}).get('moveCheck')})"
        moved = sum(1 for e in fc.events if e[1] == "MovedForRoom")
        plans.add((fc.phase(BIG), moved))

    def fmt(values: list[float]) -> str:
        return f"{min(values):.2f} / {statistics.median(values):.2f} s"

    return (
        f"{nodes} nodes: pass with the ask {fmt(asking.wall_s)} (CPU {fmt(asking.cpu_s)}), quiet pass"
        f" {fmt(quiet.wall_s)} (CPU {fmt(quiet.cpu_s)}), fastest / median of {repeat};"
        f" then the waiting job {', '.join(f'{p} after {m} moves' for p, m in sorted(plans))}"
    )


def main(argv: list[str]) -> None:
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    sizes = [int(a) for i, a in enumerate(argv) if a.isdigit() and (i == 0 or argv[i - 1] != "--repeat")]
    for nodes in sizes or [1024, 4096, 12500]:
        print(measure(nodes, repeat), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Time one ask of the move planner (``core.moves.plan_moves``) on an HGX cluster whose free GPUs are scattered.

    python -m tests.bench.move_plan [--whole] [--repeat N] [NODES ...]      (default: 3 x 1024 4096 12500)

Each size is 8-GPU nodes, 32 per leaf and 512 per spine, with a 2-GPU job on every node (6 GPUs free on each,
no node whole), and a TP8 x DP32 job waiting: it needs 32 whole nodes, so the plan frees a leaf by moving its
32 small jobs elsewhere (8 candidate leaves, a try and up to 3 trims each). Per size it prints the seconds of
one ask (fastest and median of N, each on a fresh cluster: the machine is shared) and the plan: its domain,
moves and a digest of where everything goes, to compare two versions by. By default the waiting job's tries
are asked of each candidate leaf alone (the operator's and the simulator's way); ``--whole`` asks them of the
whole state with every other node closed, as before. An older commit's code runs the same way from a
worktree of it (docs/benchmarks.md). Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import hashlib
import inspect
import statistics
import sys
import time

from paralleljob.core import Allocation, ClusterState, JobSpec, Topology, cost_model
from paralleljob.core.moves import MovableJob, MoveBounds, MovePlan, MoveRequest, plan_moves
from paralleljob.core.placing.placer import OPERATOR_PLACER, Placer
from paralleljob.core.timing.evaluate import placement_cost


def scenario(nodes: int) -> tuple[ClusterState, MoveRequest]:
    topology = Topology.uniform(nodes, 8, levels=[("leaf", 32, 100.0), ("spine", 512, 50.0)])
    state = ClusterState(topology)
    model = cost_model("seed")
    now = 100_000.0
    running = []
    for n in range(nodes):
        job = JobSpec(f"small-{n}", 2, 1, 1, 10.0)
        first = topology.node_first_gpu[n]
        groups = ((first, first + 1),)
        state.allocate(Allocation(job.job_id, groups, 10.0))
        cost = placement_cost(topology, job, groups, model).total_ms
        running.append(MovableJob(job, cost, started_at=now - 60.0, checkpoint_interval_s=3600.0))
    waiting = JobSpec("big", 8, 1, 32, 10.0)
    return state, MoveRequest(waiting, tuple(running), MoveBounds(max_moves_per_hour=100), now)


def digest(plan: MovePlan) -> str:
    where = [(m.job_id, m.when.value, m.placement.groups if m.placement else None) for m in plan.moves]
    text = repr((plan.domain, plan.held_nodes, where, plan.placement.groups, plan.placement.cost.total_ms))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def main(argv: list[str]) -> None:
    whole = "--whole" in argv
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    sizes = [int(a) for i, a in enumerate(argv) if a.isdigit() and (i == 0 or argv[i - 1] != "--repeat")]
    narrowing = "placer_for" in inspect.signature(plan_moves).parameters  # absent before the narrowing
    mode = "whole state" if whole or not narrowing else "domain alone"
    for nodes in sizes or [1024, 4096, 12500]:
        times, plans = [], set()
        for _ in range(repeat):
            state, request = scenario(nodes)
            placer = Placer(state, OPERATOR_PLACER)
            extra = {"placer_for": lambda s: Placer(s, OPERATOR_PLACER), "narrow": not whole} if narrowing else {}
            started = time.perf_counter()
            decision = plan_moves(state, placer, cost_model("seed"), request, **extra)  # type: ignore[arg-type]
            times.append(time.perf_counter() - started)
            if not isinstance(decision, MovePlan):
                print(f"{nodes} nodes: no plan ({'; '.join(decision.reasons)})")
                return
            plans.add((decision.domain, len(decision.moves), digest(decision)))
        print(
            f"{nodes} nodes ({mode}): fastest {min(times):.2f} s, median {statistics.median(times):.2f} s"
            f" of {repeat}; plan {', '.join(f'{d}, {m} moves, {h}' for d, m, h in sorted(plans))}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])

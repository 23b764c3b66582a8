"""The strict-FIFO pass that leaves quiet lines out (k8s/plan/waiting.py) against the full pass, on random
event sequences, as the view's kept-vs-rebuild check does for nodes: two in-memory clusters get the same
jobs, finishes, deletions, queue caps and node cordons, one decided with the waiting memo and one without;
after every pass every job has the same phase, the same Placed reason and the same placement, and the memo
really left lines out (else the test would prove nothing)."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from paralleljob.k8s.edge.queues import QueueInfo
from paralleljob.k8s.plan.metrics_model import queue_waits
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import START, FakeCluster

QUEUES = ["default", "a", "b"]
SHAPES = [(1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (4, 1, 2), (8, 1, 2), (8, 2, 2)]

add = st.tuples(st.just("add"), st.sampled_from(SHAPES), st.sampled_from(QUEUES), st.integers(0, 2))
finish = st.tuples(st.just("finish"), st.integers(0, 10**6))
delete = st.tuples(st.just("delete"), st.integers(0, 10**6))
cap = st.tuples(st.just("cap"), st.sampled_from(QUEUES[1:]), st.one_of(st.none(), st.integers(0, 24)))
cordon = st.tuples(st.just("cordon"), st.integers(0, 3), st.booleans())
events = st.lists(
    st.one_of(add, add, add, add, finish, finish, delete, cap, cordon, st.just(("pass",))), min_size=12, max_size=30
)


def outcome(fc: FakeCluster) -> dict[str, tuple[Any, ...]]:
    out = {}
    for key, body in fc.jobs.items():
        status = body.get("status") or {}
        placed = next((c for c in status.get("conditions") or [] if c.get("type") == "Placed"), {})
        pods = (status.get("placement") or {}).get("pods", [])
        slots = [(s.get("node"), tuple(s.get("gpuIndices") or ())) for s in pods]
        out[key] = (status.get("phase"), placed.get("status"), placed.get("reason"), tuple(slots))
    return out


def apply(fc: FakeCluster, step: tuple[Any, ...], serial: int) -> None:
    kind = step[0]
    running = sorted(k for k, b in fc.jobs.items() if (b.get("status") or {}).get("phase") == "Running")
    if kind == "add":
        _, (tp, pp, dp), queue, priority = step
        created = f"2024-01-01T00:{serial // 60:02d}:{serial % 60:02d}Z"
        fc.add_job(paralleljob(f"j{serial:03d}", tp, pp, dp, queue=queue, priority=priority, created=created))
    elif kind == "finish" and running:
        key = running[step[1] % len(running)]
        for pod in fc.job_pods(key):
            done = copy.deepcopy(pod)
            done["status"]["phase"] = "Succeeded"
            fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = done
    elif kind == "delete" and fc.jobs:
        keys = sorted(fc.jobs)
        del fc.jobs[keys[step[1] % len(keys)]]
    elif kind == "cap":
        _, queue, max_gpus = step
        fc.queues[queue] = QueueInfo(queue, max_gpus=max_gpus)
    elif kind == "cordon":
        _, index, off = step
        name = f"gpu-node-{index:03d}"
        fc.nodes[name] = node(name, leaf=f"leaf-{index // 2}", cordoned=off)


def waits(fc: FakeCluster) -> tuple[dict[str, float], dict[str, int], dict[str, int]]:
    """Per queue: the oldest waiting job's queuedAt and the line's length, and the jobs by phase, as the
    pass's gauges report them (the jobs a pass left out count too)."""
    plan = fc.last_plan
    if plan is None:
        return {}, {}, {}
    phases = Counter(a.draft.phase.value for a in plan.seen())
    phases.update(plan.quiet_finished)
    phases.update({"Queued": sum(plan.quiet_waiting.values())})
    lengths = {q: n for q, n in plan.queue_lengths.items() if n}
    return queue_waits(plan.seen(), 0.0, plan.quiet_oldest)[1], lengths, {p: n for p, n in phases.items() if n}


def clusters() -> tuple[FakeCluster, FakeCluster]:
    def one(memo: bool) -> FakeCluster:
        bodies = [node(f"gpu-node-{i:03d}", leaf=f"leaf-{i // 2}") for i in range(4)]
        return FakeCluster(bodies, queues={"a": QueueInfo("a"), "b": QueueInfo("b", max_gpus=12)}, memo=memo)

    return one(True), one(False)


# Found by Hypothesis in a full run: with the memo, queue a's job was bound ahead of default's jobs in the
# same pass, without it behind them (plan.jobs followed the order lines were looked at).
QUEUES_BOUND_IN_ANOTHER_ORDER = [
    ("finish", 0),
    ("add", (8, 2, 2), "default", 0),
    *[("add", (1, 1, 1), "default", 0)] * 7,
    ("add", (1, 1, 1), "a", 0),
    ("finish", 0),
    ("add", (1, 1, 1), "default", 0),
]


@settings(max_examples=50, deadline=None)
@given(events)
@example(QUEUES_BOUND_IN_ANOTHER_ORDER)
def test_leaving_quiet_lines_out_decides_as_the_full_pass(steps: list[tuple[Any, ...]]) -> None:
    kept, full = clusters()
    skipped = 0
    for serial, step in enumerate(steps):
        for fc in (kept, full):
            apply(fc, step, serial)
        for _ in range(4):  # passes write, the next decide on what was written, the last ones may skip
            kept.step()
            full.step()
            assert kept.memo is not None
            skipped += sum(kept.last_plan.quiet_waiting.values()) if kept.last_plan else 0
            assert outcome(kept) == outcome(full), f"after {step} (pass at {kept.seconds}s from {START})"
            assert kept.binds == full.binds
            assert waits(kept) == waits(full), "the queue gauges count the jobs left out as the full pass does"
    event(f"jobs left out: {'some' if skipped else 'none'}")


def test_a_quiet_line_is_left_out_and_woken_by_what_can_admit_it() -> None:
    kept, full = clusters()
    for fc in (kept, full):
        fc.add_job(paralleljob("big", 8, 2, 2, queue="a", created="2024-01-01T00:00:00Z"))  # 32 GPUs: all
        for i in range(5):
            fc.add_job(paralleljob(f"w{i}", 8, 1, 1, queue="a", created=f"2024-01-01T00:00:1{i}Z"))
        fc.settle(3)
    assert kept.last_plan is not None and kept.last_plan.quiet_waiting == {"a": 5}
    assert not [a for a in kept.last_plan.jobs if a.job.request and a.job.request.queue == "a" and a.job.name != "big"]
    for fc in (kept, full):
        for pod in fc.job_pods("ns/big"):
            done = copy.deepcopy(pod)
            done["status"]["phase"] = "Succeeded"
            fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = done
        fc.settle(3)
    assert outcome(kept) == outcome(full)
    assert sum(1 for k in kept.jobs if kept.phase(k) in ("Placing", "Running")) == 4

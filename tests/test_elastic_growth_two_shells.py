"""When an elastic job grows, and which waiting job holds it back, through both shells: the operator's passes and
the simulator's engine grow a running elastic job before the pass's admissions, held back only by a rigid job
at equal or higher priority (``core.elastic.growth_blocker`` over ``rigid_line``), and offer the same running
jobs to a higher-priority job's shrink (``core.elastic.offers_growth_replicas``).

Three 8-GPU nodes. ``filler`` (rigid, priority 0) holds one; ``el`` (elastic TP8, 1..3 replicas, priority 1)
is admitted at 2; ``low`` (rigid, priority 0) and then ``high`` (rigid, priority 1) wait. When ``filler``
ends, ``high`` holds the growth back and is admitted on the freed node; when ``high`` ends, ``el`` grows into
that node before ``low`` (lower priority) is considered. A shell that admitted before growing would give the
node to ``low``; one that ignored the blocker would grow ``el`` instead of admitting ``high``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from paralleljob.core import elastic as core_elastic
from paralleljob.core.admit import fifo
from paralleljob.core.admit.admission import Admit
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.admission import fifo_admission
from paralleljob.k8s.plan.kinds import elastic_admission, resizing
from paralleljob.sim.run import elastic as sim_elastic
from paralleljob.sim.run import passes
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

PRIORITY = {"filler": 0, "el": 1, "low": 0, "high": 1}


def _spy(monkeypatch: pytest.MonkeyPatch, admitting: Any, growing: Any) -> list[tuple[Any, ...]]:
    """Admissions and growths in the order a shell carries them out, every blocker it was told, and the GPUs an
    elastic job's cap and free count must allow (``FifoJob.min_gpus``, from ``core.elastic.min_gpus``)."""
    seen: list[tuple[Any, ...]] = []

    def schedule(*args: Any, **kwargs: Any) -> Any:
        for job in args[1].jobs:
            if job.min_gpus is not None and ("min_gpus", job.min_gpus) not in seen:
                seen.append(("min_gpus", job.min_gpus))
        decisions = fifo.schedule_fifo(*args, **kwargs)
        seen.extend(("admit", d.job_id.split("/")[-1]) for d in decisions if isinstance(d, Admit))
        return decisions

    def growth(*args: Any, **kwargs: Any) -> Any:
        grown = core_elastic.plan_growth(*args, **kwargs)
        if grown.resize is not None:
            seen.append(("grow", grown.resize.after))
        return grown

    def blocker(line: Any, priority: int) -> str:
        name = core_elastic.growth_blocker(line, priority)
        if name and ("blocked", name.split("/")[-1]) not in seen:
            seen.append(("blocked", name.split("/")[-1]))
        return name

    monkeypatch.setattr(admitting, "schedule_fifo", schedule)
    monkeypatch.setattr(growing, "plan_growth", growth)
    monkeypatch.setattr(growing, "growth_blocker", blocker)
    return seen


def _body(name: str) -> dict[str, Any]:
    created = f"2024-01-01T00:00:0{list(PRIORITY).index(name)}Z"
    body = paralleljob(name, 8, 1, 3 if name == "el" else 1, memory=0.0, priority=PRIORITY[name], created=created)
    if name == "el":
        body["spec"]["parallelism"].update(minData=1, maxData=3)
    return body


def _end(fc: FakeCluster, name: str) -> None:
    del fc.jobs[f"ns/{name}"]
    fc.pods = {k: p for k, p in fc.pods.items() if not k[1].startswith(f"{name}-")}
    fc.settle(3)


def test_both_shells_grow_before_admitting_and_hold_back_for_the_same_job(monkeypatch: pytest.MonkeyPatch) -> None:
    operator_seen = _spy(monkeypatch, fifo_admission, resizing)
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(3)])
    for name in PRIORITY:
        fc.add_job(_body(name))
        fc.settle(2)
    assert fc.job("ns/el")["status"]["replicas"] == 2
    _end(fc, "filler")
    assert fc.phase("ns/high") != "Queued" and fc.job("ns/el")["status"]["replicas"] == 2
    _end(fc, "high")
    assert fc.job("ns/el")["status"]["replicas"] == 3 and fc.phase("ns/low") == "Queued"
    assert operator_seen == [
        ("admit", "filler"), ("min_gpus", 8), ("admit", "el"), ("blocked", "high"), ("admit", "high"), ("grow", 3),
    ]  # fmt: skip

    monkeypatch.undo()
    sim_seen = _spy(monkeypatch, passes, sim_elastic)
    assert fc.last_view is not None and fc.last_view.state is not None
    model = parse_job(_body("el")).request.spec.model  # type: ignore[union-attr]
    ends = {"filler": 1_000.0, "el": 1e6, "low": 1_000.0, "high": 1_000.0}
    trace = [
        TraceJob(f"ns/{name}", float(i), ends[name], 24 if name == "el" else 8,
                 shape=(8, 1, 3 if name == "el" else 1), model=model)
        for i, name in enumerate(PRIORITY)
    ]  # fmt: skip
    simulation = Simulation(fc.last_view.state.topology, trace, SimConfig(elastic=0.3, check_invariants=True))
    for i, name in enumerate(PRIORITY):
        simulation.specs[i] = dataclasses.replace(simulation.specs[i], priority=PRIORITY[name])
    simulation.run()
    # the simulator runs on: ``low`` is admitted once ``el`` has ended
    assert sim_seen == [*operator_seen, ("admit", "low")]
    assert simulation.jobs["ns/el"].grows == 1


def test_both_shells_offer_the_same_running_jobs_to_a_shrink(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``el`` (priority 0, 1..3) runs at 3 on three 8-GPU nodes; ``urgent`` (rigid TP8, priority 5) arrives: both
    # shells ask offers_growth_replicas about ``el`` (running, not being preempted, not resized this pass) and
    # shrink_for takes its highest replica.
    real_offers = core_elastic.offers_growth_replicas

    def spy(offering: Any, shrinking: Any) -> list[tuple[Any, ...]]:
        seen: list[tuple[Any, ...]] = []

        def offers(**facts: bool) -> bool:
            verdict = real_offers(**facts)
            if ("offers", facts, verdict) not in seen:
                seen.append(("offers", facts, verdict))
            return verdict

        def shrink(*args: Any, **kwargs: Any) -> Any:
            taken = core_elastic.shrink_for(*args, **kwargs)
            if taken is not None:
                seen.extend(("shrink", r.job_id, r.before, r.after, r.groups) for r in taken.resizes)
            return taken

        monkeypatch.setattr(offering, "offers_growth_replicas", offers)
        monkeypatch.setattr(shrinking, "shrink_for", shrink)
        return seen

    operator_seen = spy(core_elastic, elastic_admission)  # the pass asks it through the core module
    fc = FakeCluster([node(f"gpu-node-{i:03d}") for i in range(3)])
    body = paralleljob("el", 8, 1, 3, memory=0.0)
    body["spec"]["parallelism"].update(minData=1, maxData=3)
    fc.add_job(body)
    fc.settle(3)
    assert fc.job("ns/el")["status"]["replicas"] == 3
    fc.add_job(paralleljob("urgent", 8, 1, 1, memory=0.0, priority=5))
    fc.settle(3)
    assert fc.job("ns/el")["status"]["replicas"] == 2 and fc.phase("ns/urgent") != "Queued"
    before_urgent = [s for s in operator_seen if s[0] == "offers"]

    monkeypatch.undo()
    sim_seen = spy(sim_elastic, sim_elastic)
    assert fc.last_view is not None and fc.last_view.state is not None
    model = parse_job(body).request.spec.model  # type: ignore[union-attr]
    trace = [
        TraceJob("ns/el", 0.0, 1e6, 24, shape=(8, 1, 3), model=model),
        TraceJob("ns/urgent", 10.0, 1_000.0, 8, shape=(8, 1, 1), model=model),
    ]
    simulation = Simulation(fc.last_view.state.topology, trace, SimConfig(elastic=0.3, check_invariants=True))
    simulation.specs[1] = dataclasses.replace(simulation.specs[1], priority=5)
    simulation.run()
    shrinks = [s for s in sim_seen if s[0] == "shrink"]
    assert shrinks == [s for s in operator_seen if s[0] == "shrink"] and len(shrinks) == 1
    offered = {"running": True, "being_preempted": False, "resized_this_pass": False, "preemptible": True}
    assert ("offers", offered, True) in before_urgent and ("offers", offered, True) in sim_seen

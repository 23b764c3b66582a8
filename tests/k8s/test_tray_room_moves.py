"""Moves that free an NVLink clique for a waiting tray job (issue 40, the operator's half of core.moves).

Two racks of 18 four-GPU trays; one-tray jobs are spread so that the free trays are enough in all (16, what
a TP8 x DP8 job takes) but split 7 + 9, so only 7 of its 8 two-tray TP groups fit: it waits only because the
free trays are scattered. The operator plans moves with ``core.moves.plan_moves``, holds the clique it frees,
moves the one-tray jobs (at once, or at their checkpoint when they would lose more than the bound), and
admits the waiting job there once they are gone."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from rich.console import Console

import paralleljob.k8s.plan.decide as decide_module
from paralleljob.clitools.describe import describe_job
from paralleljob.clitools.jobrender import description_renderable
from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_queue
from paralleljob.k8s.edge.render import computedomain as cd
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster

BIG = "ns/big"
RACK0 = [f"r0-t{t:02d}" for t in range(18) if t % 3 != 2][:11]  # 11 jobs: 7 trays free
RACK1 = [f"r1-t{t:02d}" for t in range(0, 18, 2)]  # 9 jobs: 9 trays free
SMALL = [f"ns/s{i}" for i in range(len(RACK0) + len(RACK1))]


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def trays() -> list[dict[str, Any]]:
    return [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(2) for t in range(18)
    ]  # fmt: skip


def scattered(
    queues: dict[str, QueueInfo] | None = None, interval: int = 3600, small_priority: int = 0
) -> FakeCluster:
    """The one-tray jobs Running on RACK0 + RACK1 (placed there by filling every other tray first)."""
    fc = FakeCluster(trays(), queues=queues)
    everything = [f"r{r}-t{t:02d}" for r in range(2) for t in range(18)]
    for name in everything:
        if name not in RACK0 + RACK1:
            fc.pods[("other", f"f-{name}")] = foreign_pod(f"f-{name}", name, 4)
    for key in SMALL:
        spec = {"checkpoint": {"intervalSeconds": interval}}
        fc.add_job(paralleljob(key.split("/")[1], 4, 1, 1, memory=10.0, priority=small_priority, extra_spec=spec))
    for _ in range(4):
        fc.step(at(0))
    for name in everything:
        fc.pods.pop(("other", f"f-{name}"), None)
    assert all(fc.phase(k) == "Running" for k in SMALL)
    return fc


def add_big(fc: FakeCluster, created: int) -> None:
    spec = {"checkpoint": {"intervalSeconds": 3600}}
    fc.add_job(paralleljob("big", 8, 1, 8, memory=10.0, created=at(created), extra_spec=spec))


def nodes_of(fc: FakeCluster, key: str) -> set[str]:
    return set(str(fc.job(key)["status"].get("nodes", "")).split(",")) - {""}


def described(fc: FakeCluster, key: str) -> str:
    """What ``paralleljob describe`` prints for the job."""
    console = Console(record=True, width=200)
    console.print(description_renderable(describe_job(fc.job(key), fc.job_pods(key))))
    return console.export_text()


def condition(fc: FakeCluster, key: str, ctype: str) -> dict[str, Any] | None:
    return next((c for c in fc.job(key)["status"].get("conditions", []) if c["type"] == ctype), None)


def test_scattered_one_tray_jobs_move_and_the_big_job_runs_in_one_clique() -> None:
    fc = scattered()
    add_big(fc, 600)
    for t in range(8):
        fc.step(at(600 + t))
    big = nodes_of(fc, BIG)
    assert fc.phase(BIG) == "Running", fc.job(BIG)["status"]
    assert len({n.split("-")[0] for n in big}) == 1 and len(big) == 16, big  # one clique, 16 trays
    moved = [k for k in SMALL if "lastRoomMove" in fc.job(k)["status"]]
    assert moved, "no job was moved"
    for key in SMALL:
        assert fc.phase(key) == "Running" and not nodes_of(fc, key) & big, (key, fc.job(key)["status"])
    for key in moved:
        last = fc.job(key)["status"]["lastRoomMove"]
        assert last["for"] == BIG and last["lostGpuSeconds"] == 4 * 600  # moved at once: 10 min of 4 GPUs
        said = condition(fc, key, "MovedForRoom")
        assert said is not None and BIG in said["message"] and "lost 2400 GPU-seconds" in said["message"]
        assert any(e[0] == key and e[1] == "MovedForRoom" for e in fc.events)
    assert any(e[0] == BIG and e[1] == "MovePlanned" for e in fc.events)
    assert "movePlan" not in fc.job(BIG)["status"], "an admitted job's plan is done with"
    assert f"last moved for room: at {at(600)} for {BIG}" in described(fc, moved[0]).replace("\n", " ")


def test_moves_at_checkpoints_hold_the_clique_and_resume_after_a_restart() -> None:
    # the small jobs ran 100 min without a checkpoint (interval 2 h): moving now would lose 24,000
    # GPU-seconds each, over the 4 GPU-hour bound, so each moves at its checkpoint at 2 h (in 20 min)
    fc = scattered(interval=7200)
    add_big(fc, 6000)
    for t in range(4):
        fc.step(at(6000 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "MovingJobs", status
    plan = status["movePlan"]
    held = set(plan["heldNodes"])
    assert {m["when"] for m in plan["moves"]} == {"at-checkpoint"}, plan
    assert "at its checkpoint in ~20 min" in status["message"], status["message"]
    assert not any("lastRoomMove" in fc.job(k)["status"] for k in SMALL), "nobody moves before its checkpoint"
    shown = described(fc, BIG)
    assert "planned moves" in shown and all(m["job"] in shown for m in plan["moves"]), shown
    # every free tray outside the held ones taken: a new job may not take a held one, backfill or not
    for name in [f"r{r}-t{t:02d}" for r in range(2) for t in range(18)]:
        if name not in held and not any(name in nodes_of(fc, k) for k in SMALL):
            fc.pods[("other", f"g-{name}")] = foreign_pod(f"g-{name}", name, 4)
    fc.add_job(paralleljob("late", 4, 1, 1, memory=10.0, queue="other", created=at(6010)))
    # the operator restarts: a new one reads the plan back from the status alone
    restarted = FakeCluster(trays(), queues={"other": QueueInfo("other")})
    restarted.jobs, restarted.pods = copy.deepcopy(fc.jobs), copy.deepcopy(fc.pods)
    for t in range(3):
        restarted.step(at(6100 + t))
    assert restarted.phase("ns/late") == "Queued" and not nodes_of(restarted, "ns/late"), "took a held tray"
    assert restarted.job(BIG)["status"]["movePlan"]["heldNodes"] == plan["heldNodes"]
    # the trays the moved jobs go to come free again (the plan holds the clique it frees, not their room)
    del restarted.jobs["ns/late"]
    for key in [k for k in restarted.pods if k[1].startswith("g-")]:
        del restarted.pods[key]
    for move in plan["moves"]:  # their checkpoints at 2 h
        body = restarted.job(move["job"])
        body["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(7200)}
    for t in range(8):
        restarted.step(at(7210 + t))
    assert restarted.phase(BIG) == "Running" and nodes_of(restarted, BIG) <= held, restarted.job(BIG)["status"]
    for move in plan["moves"]:
        last = restarted.job(move["job"])["status"]["lastRoomMove"]
        assert last["for"] == BIG and last["lostGpuSeconds"] == 4 * 10, last  # 10 s since its checkpoint
        assert restarted.phase(move["job"]) == "Running" and not nodes_of(restarted, move["job"]) & held


def test_a_budget_of_zero_moves_leaves_the_job_waiting_as_before() -> None:
    off = parse_queue({"metadata": {"name": "default"}, "spec": {"moves": {"perHour": 0}}})
    assert off.moves.max_moves_per_hour == 0
    fc = scattered(queues={"default": off})
    add_big(fc, 600)
    for t in range(6):
        fc.step(at(600 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "Unschedulable", status
    assert "movePlan" not in status and "moveCheck" not in status
    assert not any("lastRoomMove" in fc.job(k)["status"] for k in SMALL)


def test_a_job_of_higher_priority_is_never_moved_for_a_lower_one() -> None:
    fc = scattered(small_priority=5)
    add_big(fc, 600)
    for t in range(6):
        fc.step(at(600 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "Unschedulable", status
    assert "movePlan" not in status and "priority 5 > 0" in status["moveCheck"]["answer"], status["moveCheck"]
    assert not any("lastRoomMove" in fc.job(k)["status"] for k in SMALL)


def test_moves_are_planned_inside_the_reconcilers_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconciler decides inside a trial on its kept view (runtime/reconciler.pass_once) and trials do
    not nest: the planner's tries run on a scratch copy of the state."""
    build = decide_module.build_view

    def in_a_trial(*args: Any, **kwargs: Any) -> Any:
        view = build(*args, **kwargs)
        view.state.begin_trial()
        return view

    monkeypatch.setattr(decide_module, "build_view", in_a_trial)
    fc = scattered()
    add_big(fc, 600)
    for t in range(8):
        fc.step(at(600 + t))
    assert fc.phase(BIG) == "Running", fc.job(BIG)["status"]
    assert any("lastRoomMove" in fc.job(k)["status"] for k in SMALL)


def test_a_tray_job_short_of_gpus_in_all_waits_as_before_with_nothing_written() -> None:
    """Moving jobs frees no GPU: a job that needs more than are free is no case for moves, and its status
    gets nothing new (no plan, no answer, no extra write every few minutes)."""
    fc = scattered()
    fc.add_job(paralleljob("big", 8, 1, 16, memory=10.0, created=at(600)))  # 128 GPUs, 64 free
    for t in range(4):
        fc.step(at(600 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "Unschedulable", status
    assert "movePlan" not in status and "moveCheck" not in status, status


def test_a_moved_jobs_message_and_record_give_the_same_lost_work() -> None:
    """They rounded apart ("lost 3" in the condition, 3.5 in the record, read "4"): the e2e's
    one-tray jobs checkpoint every few seconds (the dev cluster's signal), so the fraction is all there is."""
    fc = scattered()
    for key in SMALL:  # a checkpoint 0.865 s before the moves: 3.46 GPU-seconds lost each
        fc.job(key)["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: "2024-01-01T00:09:59.135Z"}
    add_big(fc, 600)
    for t in range(4):
        fc.step(at(600 + t))
    moved = [fc.job(k)["status"] for k in SMALL if "lastRoomMove" in fc.job(k)["status"]]
    assert moved
    for status in moved:
        lost = status["lastRoomMove"]["lostGpuSeconds"]
        said = next(c for c in status["conditions"] if c["type"] == "MovedForRoom")["message"]
        assert f"lost {lost:.0f} GPU-seconds" in said, (lost, said)

"""Moves that free room on HGX (issue 40: "HGX racks"): 8-GPU nodes under two leaves, two nodes each.

A 2-GPU job runs on every node (foreign pods steer one onto each), so 24 GPUs are free in all, 6 on every
node: a TP8 x DP2 job needs two whole nodes and finds none. The operator plans with the same
``core.moves.plan_moves`` it uses for NVLink cliques, over the core placer it admits HGX jobs with: the
narrowest domain that takes the job is a leaf, so the two small jobs of one leaf move to the other leaf's
nodes (at once: they lost little since their start) and the big job runs inside that leaf, with the same
status, Events and describe as on trays. Beside NVL72 racks a TP8 job takes the tray path (its plan frees HGX
nodes all the same); a job that takes no trays there is not planned for, and its ``status.moveCheck`` says
why."""

from __future__ import annotations

from paralleljob.k8s.edge.parse.queues import parse_queue
from paralleljob.k8s.edge.render import computedomain as cd
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_tray_room_moves import at, condition, described, nodes_of

NODES = {"n0": "leaf-0", "n1": "leaf-0", "n2": "leaf-1", "n3": "leaf-1"}
SMALL = [f"ns/s{i}" for i in range(len(NODES))]
BIG = "ns/big"


def _spread(fc: FakeCluster, interval: int = 3600) -> None:
    """One 2-GPU job on every node: the others' GPUs taken by foreign pods while it is placed."""
    for i, (key, name) in enumerate(zip(SMALL, NODES, strict=True)):
        for other in NODES:
            if other != name:
                fc.pods[("other", f"f-{other}")] = foreign_pod(f"f-{other}", other, 8)
        spec = {"checkpoint": {"intervalSeconds": interval}}
        fc.add_job(paralleljob(key.split("/")[1], 2, 1, 1, memory=10.0, created=at(i), extra_spec=spec))
        for _ in range(3):
            fc.step(at(i))
        for other in NODES:
            fc.pods.pop(("other", f"f-{other}"), None)
    assert [nodes_of(fc, k) for k in SMALL] == [{n} for n in NODES], [fc.job(k)["status"] for k in SMALL]


def _hgx(interval: int = 3600) -> FakeCluster:
    fc = FakeCluster([node(name, 8, leaf=leaf) for name, leaf in NODES.items()])
    _spread(fc, interval)
    return fc


def _big(fc: FakeCluster) -> None:
    fc.add_job(paralleljob("big", 8, 1, 2, memory=10.0, created=at(600)))


def test_moves_free_a_leaf_on_hgx_and_the_waiting_job_runs_inside_it() -> None:
    fc = _hgx()
    _big(fc)
    for t in range(8):
        fc.step(at(600 + t))
    big = nodes_of(fc, BIG)
    assert fc.phase(BIG) == "Running", fc.job(BIG)["status"]
    assert len(big) == 2 and len({NODES[n] for n in big}) == 1, big  # two whole nodes of one leaf
    moved = [k for k in SMALL if "lastRoomMove" in fc.job(k)["status"]]
    assert len(moved) == 2, [fc.job(k)["status"] for k in SMALL]
    for key in SMALL:
        assert fc.phase(key) == "Running" and not nodes_of(fc, key) & big, (key, fc.job(key)["status"])
    for key in moved:
        last = fc.job(key)["status"]["lastRoomMove"]
        started = int(key[-1])  # placed at second i
        assert last["for"] == BIG and last["lostGpuSeconds"] == 2 * (600 - started), last
        assert last["domain"].startswith("leaf "), last
        said = condition(fc, key, "MovedForRoom")
        assert said is not None and BIG in said["message"]
        assert any(e[0] == key and e[1] == "MovedForRoom" for e in fc.events)
    assert any(e[0] == BIG and e[1] == "MovePlanned" for e in fc.events)
    assert "movePlan" not in fc.job(BIG)["status"]
    assert f"last moved for room: at {at(600)} for {BIG}" in described(fc, moved[0]).replace("\n", " ")


def test_an_hgx_plan_holds_its_leaf_until_the_moves_at_checkpoints_are_done() -> None:
    # checkpoints every 3 h: at 9,500 s each small job would lose ~19,000 GPU-seconds (over the 4 GPU-hour
    # bound), so each moves at its checkpoint at 10,800 s, 22 minutes away
    fc = _hgx(interval=10800)
    fc.add_job(paralleljob("big", 8, 1, 2, memory=10.0, created=at(9500)))
    for t in range(3):
        fc.step(at(9500 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "MovingJobs", status
    plan = status["movePlan"]
    held = set(plan["heldNodes"])
    assert plan["domain"].startswith("leaf ") and len(held) == 2, plan
    assert {m["when"] for m in plan["moves"]} == {"at-checkpoint"}, plan
    assert "at its checkpoint in ~22 min" in status["message"], status["message"]
    assert not any("lastRoomMove" in fc.job(k)["status"] for k in SMALL), "nobody moves before its checkpoint"
    for t in range(6):
        fc.step(at(10810 + t))
    assert fc.phase(BIG) == "Running" and nodes_of(fc, BIG) == held, fc.job(BIG)["status"]
    for move in plan["moves"]:
        last = fc.job(move["job"])["status"]["lastRoomMove"]
        started = int(move["job"][-1])  # placed at second i: checkpoints at 10,800 + i
        assert last["lostGpuSeconds"] == 2 * (10810 - 10800 - started), last
        assert not nodes_of(fc, move["job"]) & held


def test_a_budget_of_zero_moves_leaves_an_hgx_job_waiting_as_before() -> None:
    off = parse_queue({"metadata": {"name": "default"}, "spec": {"moves": {"perHour": 0}}})
    fc = FakeCluster([node(name, 8, leaf=leaf) for name, leaf in NODES.items()], queues={"default": off})
    _spread(fc)
    _big(fc)
    for t in range(6):
        fc.step(at(600 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "Unschedulable", status
    assert "movePlan" not in status and "moveCheck" not in status
    assert not any("lastRoomMove" in fc.job(k)["status"] for k in SMALL)


def _mixed() -> FakeCluster:
    """The HGX nodes beside four NVL72 trays, every tray busy (foreign pods)."""
    trays = [
        node(f"r0-t{t:02d}", 4, leaf="leaf-r0", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: "uuid.0"})
        for t in range(4)
    ]
    fc = FakeCluster([*(node(name, 8, leaf=leaf) for name, leaf in NODES.items()), *trays])
    for t in range(4):
        fc.pods[("other", f"t-{t}")] = foreign_pod(f"t-{t}", f"r0-t{t:02d}", 4)
    return fc


def test_beside_nvl72_racks_a_tp8_job_is_planned_for_as_a_tray_job() -> None:
    """TP8 is larger than a tray, so the job takes the tray path (an 8-GPU node is an NVLink domain of its
    own there), and its plan frees a leaf of HGX nodes all the same."""
    fc = _mixed()
    _spread(fc)
    _big(fc)
    for t in range(6):
        fc.step(at(600 + t))
    big = nodes_of(fc, BIG)
    assert fc.phase(BIG) == "Running" and len(big) == 2 and len({NODES.get(n) for n in big}) == 1, big
    assert sum("lastRoomMove" in fc.job(k)["status"] for k in SMALL) == 2


def test_a_job_that_takes_no_trays_beside_nvl72_racks_is_not_planned_for_and_says_why() -> None:
    fc = _mixed()
    for name in NODES:  # 3 GPUs free on each HGX node: 12 in all, no 4 together
        fc.pods[("other", f"h-{name}")] = foreign_pod(f"h-{name}", name, 5)
    fc.add_job(paralleljob("big", 4, 1, 1, memory=10.0, created=at(600)))
    for t in range(4):
        fc.step(at(600 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "Unschedulable", status
    assert "movePlan" not in status
    assert "takes none" in status["moveCheck"]["answer"], status.get("moveCheck")

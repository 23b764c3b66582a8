"""The web view shows moves that free room (issue 40) as ``describe`` does: one parse of the status
(``edge/status/moveplans.moves_of``) for the job list of every snapshot, the job's panel and the CLI.

The scene is the room-moves FakeCluster test's: one-tray jobs scattered over two NVL72 racks, a TP8 x DP8
job waiting for a clique while they move at their checkpoints; then the moves done and the job running."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from paralleljob.clitools.describe import describe_job
from paralleljob.clitools.gpumap import build_map, build_map_and_view
from paralleljob.dashboard.detail import job_detail
from paralleljob.dashboard.feed import Feed
from paralleljob.dashboard.model import picture
from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.status.moveplans import moves_of
from tests.k8s import test_tray_room_moves as room
from tests.k8s.harness import FakeCluster

APP_JS = Path(__file__).resolve().parents[2] / "operator" / "paralleljob" / "dashboard" / "static" / "app.js"


def _planned() -> FakeCluster:
    """The big job waits for its plan: every move is due at a checkpoint 20 minutes away."""
    fc = room.scattered(interval=7200)
    room.add_big(fc, 6000)
    for t in range(4):
        fc.step(room.at(6000 + t))
    assert fc.job(room.BIG)["status"].get("movePlan"), fc.job(room.BIG)["status"]
    return fc


def _moved(fc: FakeCluster) -> None:
    for move in fc.job(room.BIG)["status"]["movePlan"]["moves"]:
        fc.job(move["job"])["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: room.at(7200)}
    for t in range(8):
        fc.step(room.at(7210 + t))
    assert fc.phase(room.BIG) == "Running", fc.job(room.BIG)["status"]


def _listed(fc: FakeCluster, key: str) -> dict[str, Any]:
    shown = picture(build_map(fc.nodes.values(), fc.pods.values(), fc.jobs.values()), fc.jobs.values())
    (job,) = [j for j in shown["jobs"] if j["key"] == key]
    feed = Feed(None, None)  # type: ignore[arg-type]  # the API client is only for the reflectors
    for kind, items in {"nodes": fc.nodes, "pods": fc.pods, "jobs": fc.jobs}.items():
        feed._on_list(kind)([copy.deepcopy(b) for b in items.values()], "1")
    kept, _ = feed.build()
    assert [j for j in kept["jobs"] if j["key"] == key] == [job], "the feed packs what a full picture does"
    return job


def _panel(fc: FakeCluster, key: str) -> dict[str, Any]:
    _, view = build_map_and_view(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    detail = job_detail(fc.job(key), view, fc.job_pods(key))
    json.dumps(detail)  # what the server sends
    assert detail["moves"] == describe_job(fc.job(key), fc.job_pods(key)).to_json()["moves"]
    return detail


def test_a_waiting_jobs_plan_is_in_its_list_line_and_its_panel() -> None:
    fc = _planned()
    status = fc.job(room.BIG)["status"]
    plan = status["movePlan"]
    brief = _listed(fc, room.BIG)["moves"]
    assert brief == {
        "plan": {
            "domain": plan["domain"],
            "moves": len(plan["moves"]),
            "heldNodes": len(plan["heldNodes"]),
            "lostGpuSeconds": plan["lostGpuSeconds"],
        }
    }
    panel = _panel(fc, room.BIG)["moves"]
    assert panel["plan"] == plan, "the panel shows the plan as recorded, move by move"
    assert panel["check"] is None and panel["lastRoomMove"] is None
    assert [m["when"] for m in panel["plan"]["moves"]] == ["at-checkpoint"] * len(plan["moves"])
    for move in plan["moves"]:  # the jobs to move say nothing yet: they have not moved
        assert _listed(fc, move["job"])["moves"] == {}


def test_a_moved_job_shows_whom_it_made_room_for_and_the_work_it_lost() -> None:
    fc = _planned()
    movers = [m["job"] for m in fc.job(room.BIG)["status"]["movePlan"]["moves"]]
    _moved(fc)
    assert _listed(fc, room.BIG)["moves"] == {}, "an admitted job's plan is done with"
    for key in movers:
        last = fc.job(key)["status"]["lastRoomMove"]
        assert last["for"] == room.BIG and last["lostGpuSeconds"] == 40  # 10 s since its checkpoint, 4 GPUs
        expected = {"time": last["time"], "for": room.BIG, "domain": last["domain"], "lostGpuSeconds": 40.0}
        assert _listed(fc, key)["moves"] == {"lastRoomMove": expected}
        assert _panel(fc, key)["moves"] == {"plan": None, "check": None, "lastRoomMove": expected}


def test_a_job_no_plan_helps_shows_the_answer_in_its_panel() -> None:
    fc = room.scattered(small_priority=5)
    room.add_big(fc, 600)
    for t in range(4):
        fc.step(room.at(600 + t))
    check = fc.job(room.BIG)["status"]["moveCheck"]
    panel = _panel(fc, room.BIG)["moves"]
    assert panel["check"] == check and "priority 5 > 0" in panel["check"]["answer"]
    assert _listed(fc, room.BIG)["moves"] == {}, "the list line carries plans and moves, not every no"


def test_move_fields_this_operator_cannot_read_are_left_out() -> None:
    broken = {
        "movePlan": {"createdAt": "never", "heldNodes": [], "moves": []},
        "moveCheck": {"checkedAt": "2024-01-01T00:00:00Z", "answer": 3},
        "lastRoomMove": {"for": "ns/big", "lostGpuSeconds": 5},  # no time
    }
    assert moves_of(broken).empty
    odd = moves_of({"lastRoomMove": {"time": "2024-01-01T00:00:10Z", "lostGpuSeconds": True}})
    assert odd.last is not None and odd.last.lost_gpu_s == 0.0 and odd.last.made_room_for == ""


def _js_function(source: str, name: str) -> str:
    start = source.index(f"function {name}(")
    return source[start : source.index("\n}\n", start) + 2]


def test_app_js_renders_the_json_the_builders_make() -> None:
    """The browser's two move renderers, run by node on the list line and panel built above: every field they
    read is there (a renamed key would print "undefined")."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the browser e2e renders the page instead)")
    fc = _planned()
    movers = [m["job"] for m in fc.job(room.BIG)["status"]["movePlan"]["moves"]]
    waiting = (_listed(fc, room.BIG)["moves"], _panel(fc, room.BIG)["moves"])
    _moved(fc)
    moved = (_listed(fc, movers[0])["moves"], _panel(fc, movers[0])["moves"])
    source = APP_JS.read_text()
    script = "\n".join(_js_function(source, name) for name in ("esc", "movesBrief", "movesPanel")) + (
        "\nconst cases = JSON.parse(process.argv[1]);"
        "\nconsole.log(JSON.stringify(cases.map(([b, p]) => [movesBrief(b), movesPanel(p)])));"
    )
    done = subprocess.run(
        [node, "-e", script, json.dumps([waiting, moved])], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    (plan_line, plan_panel), (moved_line, moved_panel) = json.loads(done.stdout)
    assert "undefined" not in plan_line + plan_panel + moved_line + moved_panel
    plan = waiting[1]["plan"]
    assert f"{len(plan['moves'])} move(s) free {plan['domain']}" in plan_line
    assert all(m["job"] in plan_panel for m in plan["moves"]) and "at-checkpoint" in plan_panel
    assert f"moved for {room.BIG}" in moved_line and "lost 40 GPU-s" in moved_line
    assert "last moved for room" in moved_panel and "lost 40 GPU-seconds" in moved_panel

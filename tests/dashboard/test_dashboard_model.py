"""The web view's pure parts on an in-memory cluster settled by the operator's own decisions: the packed
picture agrees with the CLI's GPU map GPU by GPU, a patch carries only what changed and rebuilds the new
picture exactly, a job's panel measures its traffic on the topology, and the vendored d3 is the locked one."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.clitools.gpumap import build_map, build_map_and_view, job_order
from paralleljob.clitools.render import _letters
from paralleljob.dashboard.detail import job_detail
from paralleljob.dashboard.feed import Feed
from paralleljob.dashboard.model import STATE_LETTERS, patch, picture
from paralleljob.devtools import vendor
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def cluster() -> FakeCluster:
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 2}") for i in range(4)])
    fc.add_job(paralleljob("llm", 4, 2, 2))
    fc.add_job(paralleljob("small", 2, 1, 1))
    fc.settle()
    fc.add_job(paralleljob("big", 8, 2, 2))  # 32 GPUs, 14 free: waits
    fc.settle()
    return fc


def view_of(fc: FakeCluster) -> dict[str, Any]:
    return picture(build_map(fc.nodes.values(), fc.pods.values(), fc.jobs.values()), fc.jobs.values())


def apply(old: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """What app.js does with a patch."""
    new = copy.deepcopy(old)
    new["nodes"].update(change["nodes"])
    for name in change["gone"]:
        del new["nodes"][name]
    new.update({k: v for k, v in change.items() if k not in ("nodes", "gone")})
    return new


def test_picture_is_the_cli_map_packed() -> None:
    fc = cluster()
    gpu_map = build_map(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    shown = view_of(fc)
    assert json.loads(json.dumps(shown)) == shown
    for row in gpu_map.nodes:
        packed = shown["nodes"][row.name]
        assert packed["states"] == "".join(STATE_LETTERS[c.state] for c in row.gpus)
        holders = [shown["holders"][h]["key"] if h >= 0 else None for h in packed["holders"]]
        assert holders == [c.holder for c in row.gpus]
        assert shown["domains"][packed["domain"]] == row.domain
    # the web view's colour index and the terminal's letter name a job the same way
    assert {h["key"]: h["colour"] for h in shown["holders"]} == job_order(gpu_map)
    assert {k: "ABCDEFGH"[i] for k, i in job_order(gpu_map).items()} == _letters(gpu_map)
    jobs = {j["key"]: j for j in shown["jobs"]}
    assert jobs["ns/llm"]["phase"] == "Running" and len(jobs["ns/llm"]["slots"]) == 4
    assert {(s["replica"], s["stage"]) for s in jobs["ns/llm"]["slots"]} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # the real blocker, whole nodes, and the figures with the time they were counted (issue 38)
    why = "needs 4 TP groups of 8 GPUs, each inside one node; only 1 such group is free (14 GPUs free), as of"
    assert jobs["ns/big"]["slots"] == [] and why in jobs["ns/big"]["why"]
    (queue,) = shown["queues"]
    assert queue["holding"] == 18 and queue["running"] == 2
    assert [w["key"] for w in queue["waiting"]] == ["ns/big"]


def test_patch_carries_only_changed_nodes_and_rebuilds_the_new_picture() -> None:
    fc = cluster()
    before = view_of(fc)
    assert patch(before, before) is None
    fc.nodes["n3"]["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletStopped"}]
    after = view_of(fc)
    change = patch(before, after)
    assert change is not None and set(change["nodes"]) == {"n3"} and change["gone"] == []
    assert change["nodes"]["n3"]["ready"] is False and set(change["nodes"]["n3"]["states"]) == {"x"}
    assert apply(before, change) == after
    fc.nodes["n4"] = node("n4", leaf="leaf-2")  # a node no job uses, added and deleted
    after = view_of(fc)
    del fc.nodes["n4"]
    gone = view_of(fc)
    change = patch(after, gone)
    assert change is not None and change["gone"] == ["n4"] and change["nodes"] == {}
    assert apply(after, change) == gone


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["down", "up", "cordon", "drop"])), max_size=6))
def test_any_sequence_of_patches_rebuilds_the_latest_picture(changes: list[tuple[int, str]]) -> None:
    fc = cluster()
    shown = view_of(fc)
    for index, what in changes:
        name = f"n{index}"
        if what == "drop":
            fc.nodes.pop(name, None)
        elif name in fc.nodes:
            body = fc.nodes[name]
            if what == "cordon":
                body["spec"]["unschedulable"] = True
            else:
                body["status"]["conditions"] = [{"type": "Ready", "status": "True" if what == "up" else "False"}]
        new = view_of(fc)
        change = patch(shown, new)
        shown = apply(shown, change) if change is not None else shown
        assert shown == new


def test_job_panel_measures_traffic_and_the_lower_bound() -> None:
    fc = cluster()
    _, view = build_map_and_view(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    detail = job_detail(fc.job("ns/llm"), view)
    assert detail["lowerBoundMs"] is not None
    assert detail["cost"]["totalMs"] >= detail["lowerBoundMs"] - 1e-6
    levels = {level["level"]: level["bytesPerStep"] for level in detail["levels"]}
    assert levels and all(b > 0 for b in levels.values())
    assert "node" in levels, "TP groups of 4 stay inside a node"
    waiting = job_detail(fc.job("ns/big"), view)
    assert waiting["levels"] == [] and waiting["lowerBoundMs"] > 0  # not placed: no traffic, still a bound


def test_vendored_front_end_library_is_the_locked_one() -> None:
    for entry in vendor.lock().values():
        for target, digest in dict(entry["sha256"]).items():  # type: ignore[call-overload]
            assert vendor.sha256(vendor.VENDOR / target) == digest, f"{target} differs from lock.json"


# ---- the feed's incremental pictures ------------------------------------------------------------------------
def normal(shown: dict[str, Any]) -> dict[str, Any]:
    """A picture with its numbering (domains, holders: first seen in the feed, sorted in a full picture)
    replaced by the names, so two pictures of the same cluster compare equal."""
    holders = [h["key"] for h in shown["holders"]]
    rows = {
        name: {**row, "domain": shown["domains"][row["domain"]],
               "holders": [holders[h] if h >= 0 else None for h in row["holders"]]}
        for name, row in shown["nodes"].items()
    }
    colours = {h["key"]: h["colour"] for h in shown["holders"] if h["key"] in
               {k for row in rows.values() for k in row["holders"]}}
    rest = {k: v for k, v in shown.items() if k not in ("nodes", "domains", "holders", "warnings")}
    return {**rest, "nodes": rows, "colours": colours}


class Bridge:
    """Hands the fake cluster's objects to a Feed as a watch would: a list, then ADDED/MODIFIED/DELETED
    events for what changed, each with a growing resourceVersion and a UID per object."""

    def __init__(self, fc: FakeCluster) -> None:
        self.fc, self.rv = fc, 0
        self.feed = Feed(None, None)  # type: ignore[arg-type]  # the API client is only for the reflectors
        self.seen: dict[str, dict[Any, Any]] = {}
        for kind, objects in self.objects().items():
            self.feed._on_list(kind)([self.stamp(b) for b in objects.values()], str(self.rv))
            self.seen[kind] = {k: copy.deepcopy(b) for k, b in objects.items()}

    def objects(self) -> dict[str, dict[Any, Any]]:
        return {"nodes": dict(self.fc.nodes), "pods": dict(self.fc.pods), "jobs": dict(self.fc.jobs)}

    def stamp(self, body: dict[str, Any], uid: Any = None) -> dict[str, Any]:
        self.rv += 1
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"{meta.get('namespace', '')}/{meta.get('name', '')}/{uid}")
        return body

    def sync(self) -> None:
        for kind, objects in self.objects().items():
            before = self.seen[kind]
            for key, body in objects.items():
                if key not in before:
                    self.feed._on_event(kind)("ADDED", self.stamp(body, id(body)))
                elif before[key] != body:
                    self.feed._on_event(kind)("MODIFIED", self.stamp(body, id(body)))
            for key, body in before.items():
                if key not in objects:
                    self.feed._on_event(kind)("DELETED", self.stamp(body, id(body)))
            self.seen[kind] = {k: copy.deepcopy(b) for k, b in objects.items()}


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["down", "up", "cordon", "job"])), max_size=5))
def test_the_feeds_kept_rows_equal_a_full_picture_after_any_changes(changes: list[tuple[int, str]]) -> None:
    fc = cluster()
    bridge = Bridge(fc)
    for step, (index, what) in enumerate(changes):
        body = fc.nodes[f"n{index}"]
        if what == "cordon":
            body["spec"]["unschedulable"] = not body["spec"].get("unschedulable", False)
        elif what == "job":
            fc.add_job(paralleljob(f"j{step}", 2, 1, 1))
        else:
            body["status"]["conditions"] = [{"type": "Ready", "status": "True" if what == "up" else "False"}]
        fc.settle()  # the operator's own decisions: repairs, placements, queueing
        bridge.sync()
        shown = copy.deepcopy(bridge.feed.current)
        kept, view = bridge.feed.build()
        full = picture(build_map(fc.nodes.values(), fc.pods.values(), fc.jobs.values()), fc.jobs.values())
        assert normal(kept) == normal(full)
        # the patch a browser gets names only the rows this build re-packed, and still rebuilds the picture
        change = patch(shown, kept, bridge.feed.changed_rows) if shown is not None else None
        bridge.feed._publish(kept, view)
        if shown is not None:
            assert (apply(shown, change) if change else shown) == kept

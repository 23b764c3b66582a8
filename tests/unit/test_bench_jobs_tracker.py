"""``paralleljob bench jobs``' tracker and flood bodies: with ``--ttl-after-finished`` the operator deletes a
job right after it finishes, so the watch may never deliver a MODIFIED event saying Succeeded; the DELETED
event's object decides whether the job counts as done."""

from __future__ import annotations

import random
from typing import Any

from paralleljob.devtools.bench_jobs import JobTracker, flood_body


def job(name: str, phase: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase} if phase else {}}


def tracker() -> JobTracker:
    return JobTracker(kube=None)  # type: ignore[arg-type]  # events are fed by hand: no watch runs


def test_a_job_deleted_after_succeeding_counts_as_done_once() -> None:
    t = tracker()
    t.on_event({"type": "ADDED", "object": job("a", "Queued")})
    t.on_event({"type": "MODIFIED", "object": job("a", "Succeeded")})
    first = t.done_at["a"]
    t.on_event({"type": "DELETED", "object": job("a", "Succeeded")})
    assert t.done_at == {"a": first} and t.waiting() == 0 and "a" not in t.phase


def test_a_job_last_seen_running_counts_as_done_only_if_its_final_object_says_succeeded() -> None:
    t = tracker()
    for name in ("ok", "lost", "placing"):
        t.on_event({"type": "ADDED", "object": job(name, "Running" if name != "placing" else "Placing")})
    t.on_event({"type": "DELETED", "object": job("ok", "Succeeded")})  # the MODIFIED to Succeeded was not seen
    t.on_event({"type": "DELETED", "object": job("lost", "Running")})  # deleted by hand while it ran
    t.on_event({"type": "DELETED", "object": job("placing", "Failed")})
    assert set(t.done_at) == {"ok"} and set(t.admitted_at) == {"ok", "lost", "placing"}
    assert t.phase == {}


def test_a_waiting_job_that_is_deleted_no_longer_counts_as_waiting() -> None:
    t = tracker()
    t.on_event({"type": "ADDED", "object": job("w", None)})
    assert t.waiting() == 1
    t.on_event({"type": "DELETED", "object": job("w", "Queued")})
    assert t.waiting() == 0 and not t.done_at


def test_flood_bodies_carry_the_ttl_only_when_asked() -> None:
    plain = flood_body("f0", random.Random(1), 4, (1.0, 2.0))
    assert "ttlSecondsAfterFinished" not in plain["spec"]
    with_ttl = flood_body("f0", random.Random(1), 4, (1.0, 2.0), ttl_s=0)
    assert with_ttl["spec"]["ttlSecondsAfterFinished"] == 0
    assert {k: v for k, v in with_ttl["spec"].items() if k != "ttlSecondsAfterFinished"} == plain["spec"]


def test_a_job_deleted_while_the_watch_was_down_counts_as_done_when_the_relist_misses_it() -> None:
    t = tracker()
    t.relisted([job("kept", "Queued"), job("gone", "Running"), job("seen-done", "Running")])
    t.on_event({"type": "MODIFIED", "object": job("seen-done", "Succeeded")})
    first = t.done_at["seen-done"]
    # the watch broke; "gone" finished and its TTL deleted it before the relist, "seen-done" too
    t.relisted([job("kept", "Queued"), job("new", None)])
    assert set(t.done_at) == {"gone", "seen-done"} and t.done_at["seen-done"] == first
    assert t.gone_unseen == {"gone"}
    assert t.phase == {"kept": "Queued", "new": "Pending"} and t.waiting() == 2

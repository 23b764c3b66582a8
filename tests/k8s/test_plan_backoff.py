"""The waits and node warnings the pass decides and hands back in its Plan (``plan/failure/backoff.py``,
``plan/nodenotes.py``), alone and through ``decide`` with the state carried from pass to pass."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.plan.failure.backoff import API_TROUBLE_PAUSE, ROLLBACK_BACKOFF, Backoff
from paralleljob.k8s.plan.nodenotes import node_warnings
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def condition(fc: FakeCluster, key: str, kind: str) -> dict[str, Any]:
    return next(c for c in fc.job(key)["status"]["conditions"] if c["type"] == kind)


def test_each_refusal_in_a_row_waits_longer_up_to_a_minute() -> None:
    backoff, now, waits = Backoff(), 1000.0, []
    for _ in range(len(ROLLBACK_BACKOFF) + 2):
        backoff = backoff.after({"ns/j": "quota exceeded"}, {}, now)
        waits.append(backoff.holds["ns/j"].until - now)
        assert "quota exceeded" in backoff.active(now)["ns/j"]
        now = backoff.holds["ns/j"].until  # the wait ends; the gang is refused again
        assert backoff.active(now) == {}
    assert waits == [*ROLLBACK_BACKOFF, ROLLBACK_BACKOFF[-1], ROLLBACK_BACKOFF[-1]]


def test_a_bound_gang_starts_over_and_a_deleted_job_is_forgotten() -> None:
    backoff = Backoff().after({"ns/a": "x", "ns/b": "y"}, {}, 0.0).after({"ns/a": "x"}, {}, 1.0)
    assert backoff.refusals == {"ns/a": 2, "ns/b": 1}
    settled = backoff.settle(10.0, jobs={"ns/a", "ns/b"}, bound={"ns/a"})
    assert settled.refusals == {"ns/b": 1} and settled.holds == {}, "waits over, a's count starts over"
    assert Backoff().after({"ns/a": "x"}, {}, 0.0).settle(0.5, jobs=set(), bound=set()) == Backoff()
    assert settled.after({"ns/a": "x"}, {}, 20.0).holds["ns/a"].until == 20.0 + ROLLBACK_BACKOFF[0]


def test_api_trouble_waits_half_a_second_and_does_not_count_as_a_refusal() -> None:
    backoff = Backoff().after({}, {"ns/j": "429 Too Many Requests"}, 5.0)
    assert backoff.holds["ns/j"].until == 5.0 + API_TROUBLE_PAUSE and backoff.refusals == {}
    assert backoff.next_end() == 5.0 + API_TROUBLE_PAUSE
    both = Backoff().after({"ns/j": "forbidden"}, {"ns/j": "503"}, 5.0)
    assert both.holds["ns/j"].until == 5.0 + ROLLBACK_BACKOFF[0], "a refusal's wait is not shortened"


@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans(), st.floats(0, 100)), max_size=30))
def test_waits_are_bounded_and_only_active_until_they_end(events: list[tuple[str, bool, float]]) -> None:
    backoff, now = Backoff(), 0.0
    for job, refused, step in events:
        now += step
        reports = {f"ns/{job}": "why"}
        backoff = backoff.after(reports if refused else {}, {} if refused else reports, now)
        for key, hold in backoff.holds.items():
            assert hold.until <= now + ROLLBACK_BACKOFF[-1]  # as the wait was computed (no float rounding)
            assert (key in backoff.active(now)) == (hold.until > now)
        backoff = backoff.settle(now, jobs={"ns/a", "ns/b", "ns/c"}, bound=set())
        end = backoff.next_end()
        assert end is None or end > now


def test_a_rolled_back_gang_waits_out_its_back_off_and_the_pass_asks_to_be_woken() -> None:
    fc = FakeCluster([node("n0"), node("n1")])
    fc.add_job(paralleljob("j", 2, 2, 1))
    fc.step()
    fc.bind_failures["ns/j"] = "pods is forbidden: exceeded quota"
    plan = fc.step()  # t: rolled back
    assert fc.phase("ns/j") == "Queued" and not fc.job_pods("ns/j")
    assert condition(fc, "ns/j", "Placed")["reason"] == "BindFailed"
    assert plan.wake_after == ROLLBACK_BACKOFF[0], "woken when the wait ends, not at the next resync"
    fc.step()  # t + 1 s: the wait is over, placed again
    assert fc.phase("ns/j") == "Placing"
    fc.bind_failures["ns/j"] = "pods is forbidden: exceeded quota"
    plan = fc.step()  # u: rolled back a second time in a row
    assert plan.wake_after == ROLLBACK_BACKOFF[1]
    fc.step()  # u + 1 s: still waiting
    placed = condition(fc, "ns/j", "Placed")
    assert fc.phase("ns/j") == "Queued" and placed["reason"] == "BackingOff"
    assert "retrying in 2 s after: pods is forbidden" in placed["message"]
    fc.step()  # u + 2 s
    assert fc.phase("ns/j") == "Placing"
    fc.step()
    assert fc.phase("ns/j") == "Running"
    assert fc.backoff.refusals == {}, "its gang bound: the next refusal waits 1 s again"


def test_api_trouble_holds_the_job_for_half_a_second() -> None:
    fc = FakeCluster([node("n0")])
    fc.add_job(paralleljob("j", 8, 1, 1))
    fc.api_trouble["ns/j"] = "503 Service Unavailable"
    plan = fc.step()
    assert fc.phase("ns/j") == "Queued" and condition(fc, "ns/j", "Placed")["reason"] == "BackingOff"
    assert plan.wake_after == API_TROUBLE_PAUSE
    fc.step()
    assert fc.phase("ns/j") == "Placing"


def test_a_malformed_node_is_warned_about_once_per_change() -> None:
    config = TopologyConfig()
    good = parse_node(node("n0"), config)
    bad_body = node("n0")
    bad_body["metadata"]["labels"]["nvidia.com/gpu.count"] = "eight"
    bad = parse_node(bad_body, config)
    assert bad.warnings
    reported, events = node_warnings({}, {"n0": bad})
    assert [e.reason for e in events] == ["MalformedLabel"] * len(bad.warnings) and "eight" in events[0].message
    assert node_warnings(reported, {"n0": bad}) == (reported, []), "a heartbeat of the same node says nothing"
    assert node_warnings(reported, {"n0": good}) == ({}, []), "mended: forgotten, so a relapse is reported"
    assert node_warnings(reported, {"n0": None}) == ({}, []), "deleted: forgotten"
    assert node_warnings(reported, {}) == (reported, [])


def test_the_pass_reports_node_warnings_in_its_plan() -> None:
    bad = node("n1")
    bad["metadata"]["labels"]["nvidia.com/gpu.count"] = "eight"
    fc = FakeCluster([node("n0"), bad])
    fc.step()
    fc.step()
    assert [e.node for e in fc.node_events] == ["n1"] and fc.node_warnings.keys() == {"n1"}


def test_a_node_offering_fewer_gpus_than_its_gfd_count_is_warned_about_too() -> None:
    # Issue 22: allocatable 999 with gpu.count 8 got an event, allocatable 0 with gpu.count 8 got none.
    config = TopologyConfig()
    body = node("n0")
    body["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    short = parse_node(body, config)
    assert short.gpu_count == 0
    reported, events = node_warnings({}, {"n0": short})
    assert [(e.node, e.event_type, e.reason) for e in events] == [("n0", "Warning", "MalformedLabel")]
    assert "allocatable nvidia.com/gpu=0 is less than nvidia.com/gpu.count=8" in events[0].message
    assert "device plugin" in events[0].message
    assert node_warnings(reported, {"n0": short}) == (reported, []), "once, not on every heartbeat"
    assert not parse_node(node("n0"), config).warnings, "allocatable equal to the count says nothing"

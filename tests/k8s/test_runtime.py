"""The operator's runtime against fakes: leader election (never two leaders, a stalled leader steps down
before anyone may take over, expiry by locally observed time), /healthz's verdicts, the write fence, and a
watch stream that survives a garbage line."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from typing import Any

import pytest
from aiohttp import web

from paralleljob.k8s.runtime.api import ApiError, NotLeading, parse_watch_line
from paralleljob.k8s.runtime.election import LeaderElection
from paralleljob.k8s.runtime.observe.health import Health
from tests.k8s.localserver import serve

DURATION, DEADLINE, RETRY = 0.6, 0.4, 0.05


class FakeLeases:
    """A Lease endpoint with resourceVersion checks; a caller can be made to hang (partitioned/paused)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.hanging: set[str] = set()

    def api(self, who: str) -> FakeKube:
        return FakeKube(self, who)


class FakeKube:
    def __init__(self, leases: FakeLeases, who: str) -> None:
        self.leases, self.who = leases, who

    async def request(self, method: str, path: str, body: Any = None, fenced: bool = True) -> dict[str, Any]:
        assert not fenced or method == "GET", "the election's own writes must bypass the fence"
        while self.who in self.leases.hanging:
            await asyncio.sleep(0.01)
        store = self.leases
        if method == "GET":
            if store.lease is None:
                raise ApiError(404, "not found")
            return copy.deepcopy(store.lease)
        if method == "POST":
            if store.lease is not None:
                raise ApiError(409, "exists")
        elif method == "PUT" and (
            store.lease is None or body["metadata"].get("resourceVersion") != store.lease["metadata"]["resourceVersion"]
        ):
            raise ApiError(409, "conflict")
        store.rv += 1
        store.lease = copy.deepcopy(body)
        store.lease["metadata"]["resourceVersion"] = str(store.rv)
        return copy.deepcopy(store.lease)


def election(leases: FakeLeases, who: str) -> LeaderElection:
    return LeaderElection(leases.api(who), "ns", "lease", who, DURATION, DEADLINE, RETRY)  # type: ignore[arg-type]


async def watch_leaders(elections: list[LeaderElection], seconds: float, log: list[tuple[float, str]]) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        leading = [e.identity for e in elections if e.leading()]
        assert len(leading) <= 1, f"two leaders at once: {leading}"
        log.append((loop.time(), ",".join(leading)))
        await asyncio.sleep(0.005)


def test_bad_timings_are_refused() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        LeaderElection(None, "ns", "l", "me", 10, renew_deadline_s=12)  # type: ignore[arg-type]


def test_one_leader_and_a_stalled_leader_steps_down_before_a_standby_takes_over() -> None:
    async def scenario() -> None:
        leases = FakeLeases()
        a, b = election(leases, "a"), election(leases, "b")
        tasks = [asyncio.create_task(a.run()), asyncio.create_task(b.run())]
        log: list[tuple[float, str]] = []
        await watch_leaders([a, b], 1.0, log)
        first = a if a.leading() else b
        other = b if first is a else a
        assert first.leading() and not other.leading(), "someone leads after a second, alone"
        stalled_at = asyncio.get_running_loop().time()
        leases.hanging.add(first.identity)  # its API calls now hang: a partition, or a paused process
        await watch_leaders([a, b], 2.0, log)
        assert first.lost.is_set() and not first.leading()
        assert other.leading(), "the standby took over"
        # Judged from the elections' own clock reads, not from when this loop looked: on a loaded machine
        # a look may come late, which must not count against the elections (it only helps these bounds).
        renewed = first._renewed_at  # its last successful renewal, started before the stall
        assert renewed is not None and renewed <= stalled_at
        late = [t for t, who in log if who == first.identity and t >= renewed + DEADLINE + 0.05]
        assert not late, "the stalled leader stopped acting within its renew deadline"
        took = next(t for t, who in log if t > stalled_at and who == other.identity)
        assert took >= renewed + DURATION, "and the standby took over only once a whole lease stood still"
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())


def test_expiry_is_judged_by_local_observation_not_the_holders_timestamps() -> None:
    async def scenario() -> None:
        leases = FakeLeases()
        future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        leases.lease = {
            "metadata": {"name": "lease", "resourceVersion": "1"},
            "spec": {"holderIdentity": "ghost", "renewTime": future, "leaseDurationSeconds": 1},
        }
        b = LeaderElection(leases.api("b"), "ns", "lease", "b", 2.0, 1.2, 0.1)  # type: ignore[arg-type]
        task = asyncio.create_task(b.run())
        await asyncio.sleep(0.6)
        assert not b.leading(), "a lease just seen is not taken at once"
        await asyncio.sleep(1.2)
        assert b.leading(), "a holder whose record stood still for a whole lease is gone, whatever its clock says"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_health_verdicts() -> None:
    health = Health(max_pass_age_s=100, max_watch_down_s=60, started_at=0)
    assert health.verdict(50, leading=True)[0]
    assert not health.verdict(150, leading=True)[0], "a leader that never passed"
    assert health.verdict(150, leading=False)[0], "a standby does not pass"
    health.passed(140)
    assert health.verdict(150, leading=True) == (True, "ok (leader)")
    health.watch_down(150)
    assert health.verdict(200, leading=True)[0]
    ok, text = health.verdict(211, leading=True)
    assert not ok and "pod watch" in text
    health.watch_up()
    assert health.verdict(211, leading=True)[0]
    health.died("reconciler", "died: RuntimeError()")
    ok, text = health.verdict(212, leading=True)
    assert not ok and "reconciler" in text


def test_garbage_watch_lines_are_skipped() -> None:
    assert parse_watch_line(b'{"type": "ADDED", "object": {}}', "/p") == {"type": "ADDED", "object": {}}
    assert parse_watch_line(b"<html>proxy error</html>", "/p") is None
    assert parse_watch_line(b"[1, 2]", "/p") is None


def test_a_real_watch_stream_survives_a_garbage_line_and_writes_are_fenced() -> None:
    async def scenario() -> None:
        async def pods(request: web.Request) -> web.StreamResponse:
            assert request.query.get("watch") == "1"
            response = web.StreamResponse()
            await response.prepare(request)
            for line in (
                b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}',
                b"\x00garbage{",
                b"",
                b'{"type":"DELETED","object":{"metadata":{"name":"a"}}}',
            ):
                await response.write(line + b"\n")
            return response

        async def create(_: web.Request) -> web.Response:
            return web.json_response({"metadata": {"name": "p"}}, status=201)

        app = web.Application()
        app.router.add_get("/api/v1/pods", pods)
        app.router.add_post("/api/v1/namespaces/ns/pods", create)
        runner, kube = await serve(app)
        try:
            events = [e async for e in kube.watch("/api/v1/pods", "1")]
            assert [e["type"] for e in events] == ["ADDED", "DELETED"]
            leading = [True]
            kube.write_fence = lambda: leading[0]
            assert (await kube.request("POST", "/api/v1/namespaces/ns/pods", {}))["metadata"]["name"] == "p"
            leading[0] = False
            with pytest.raises(NotLeading):
                await kube.request("POST", "/api/v1/namespaces/ns/pods", {})
            assert (await kube.request("POST", "/api/v1/namespaces/ns/pods", {}, fenced=False))["metadata"]
        finally:
            await kube.close()
            await runner.cleanup()

    asyncio.run(scenario())

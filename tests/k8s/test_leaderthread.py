"""The leader election on its own thread: a main loop blocked far past the renew deadline (a burst of job
creations, a long pass) no longer makes the leader step down, and a clean stop releases the lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from paralleljob.k8s.runtime.api import Kube
from paralleljob.k8s.runtime.leaderthread import ElectionThread
from tests.k8s.fakekube import FakeApi
from tests.timings import record_time

DURATION = 1.5  # renew deadline 1.0 s, a renewal every 0.2 s


async def led_by_a(api: FakeApi, observe: Callable[[str, float], None] | None = None) -> ElectionThread:
    """Replica "a"'s election on its thread, once it leads."""

    async def connect() -> Kube:
        return api.client("a")

    election = ElectionThread(connect, "ns", "lease", "a", DURATION, observe=observe)
    await election.start()
    await asyncio.wait_for(election.leader.wait(), 5)
    return election


def test_a_blocked_main_loop_does_not_starve_the_lease() -> None:
    renewals: list[tuple[str, float]] = []

    async def scenario() -> tuple[bool, bool, str | None]:
        api = FakeApi()
        election = await led_by_a(api, observe=lambda o, s: renewals.append((o, s)))
        time.sleep(3 * DURATION)  # the main loop does not run at all for three lease durations
        leading = election.leading()
        lost = election.lost.is_set()
        await election.release()
        lease = api.get("/apis/coordination.k8s.io/v1/namespaces/ns/leases/lease")
        holder = None if lease is None else lease["spec"].get("holderIdentity")
        return leading, lost, holder

    leading, lost, holder = asyncio.run(scenario())
    assert leading and not lost, "the election's thread renewed the lease while the main loop was blocked"
    assert sum(outcome == "renewed" for outcome, _ in renewals) >= 10
    assert holder is None, "a clean stop gives the lease up"


def test_stepping_down_is_seen_by_the_main_loop() -> None:
    async def scenario() -> bool:
        api = FakeApi()
        election = await led_by_a(api)
        api.hanging.add("a")  # the API server stops answering this replica (a partition)
        await asyncio.wait_for(election.lost.wait(), 5)
        leading = election.leading()
        api.hanging.discard("a")
        election.stop()
        return leading

    assert asyncio.run(scenario()) is False


def test_a_release_handed_to_an_election_loop_that_no_longer_runs_is_bounded() -> None:
    # An election that has just stepped down ends its loop on its own; a release handed to it then never ran,
    # and the operator hung after logging "stepping down" instead of exiting.
    async def scenario() -> float:
        api = FakeApi()
        election = await led_by_a(api)
        running = election._loop
        stalled = asyncio.new_event_loop()  # open, but nothing runs it: the moment after the thread's loop stopped
        election._loop = stalled
        election.release_timeout_s = 0.3
        election.stop = lambda: None  # type: ignore[method-assign]  # the real thread is stopped below
        started = time.monotonic()
        await asyncio.wait_for(election.release(), 60)  # the bug: it never returned
        took = time.monotonic() - started
        election._loop = running
        ElectionThread.stop(election)
        stalled.close()
        return took

    record_time("release handed to a stopped election loop", asyncio.run(scenario()), 0.3)


def test_the_garbage_collector_waits_for_the_next_renewal_only_while_this_instance_leads() -> None:
    class Election:
        renewals = 0
        leads = True

        def leading(self) -> bool:
            return self.leads

    async def scenario() -> None:
        thread = ElectionThread(lambda: None, "ns", "lease", "a", DURATION)  # type: ignore[arg-type,return-value]
        election = Election()
        thread.election = election  # type: ignore[assignment]
        waiting = asyncio.create_task(thread.after_next_renewal(within_s=30, poll_s=0.001))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # no renewal yet: a long collection now could eat the renew deadline
        election.renewals += 1
        await asyncio.wait_for(waiting, 5)
        election.leads = False  # a standby has no lease to lose: it collects at once
        await asyncio.wait_for(thread.after_next_renewal(within_s=30), 1)
        election.leads = True  # and a leader whose renewals stall collects after ``within_s`` anyway
        await asyncio.wait_for(thread.after_next_renewal(within_s=0.05, poll_s=0.001), 5)

    asyncio.run(scenario())

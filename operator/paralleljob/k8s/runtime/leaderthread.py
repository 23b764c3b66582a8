"""The leader election on a thread of its own, so nothing the operator's main loop does can starve it.

A burst of thousands of ParallelJob creations kept the main event loop busy (watch events, long passes)
for longer than the renew deadline, and the leader stepped down although the API server answered in time:
its renewals simply never ran. Here :class:`LeaderElection` runs on its own event loop in its own thread,
with its own API client (its own connection pool, so queued writes of the main loop do not delay it
either). The main loop sees leadership through two of its own ``asyncio.Event`` objects, set thread-safely,
and through :meth:`ElectionThread.leading`, which reads the election's state (a clock reading and two flags)
and is what every write of the operator is fenced with.

If the API server itself is too slow to renew, the election logs each slow or failed renewal and counts it
(``paralleljob_lease_renewals_total{outcome}``, ``paralleljob_lease_renew_seconds``) before it steps down,
so the cause of a hand-over is on record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future

from paralleljob.k8s.runtime.api import Kube
from paralleljob.k8s.runtime.election import LeaderElection

log = logging.getLogger("paralleljob.k8s")

# How long a clean stop waits for the lease to be given up. The election's loop may be ending on its own at
# that moment (it stepped down): a release handed to a loop that no longer runs never completes, and an
# operator that had logged "stepping down" hung on it instead of exiting (seen once in a full make test).
RELEASE_TIMEOUT_S = 5.0


class ElectionThread:
    """``LeaderElection`` on a daemon thread; construct, then ``await start()`` on the main loop."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Kube]],
        namespace: str,
        name: str,
        identity: str,
        duration_s: float,
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        self._connect = connect
        self._args = (namespace, name, identity, duration_s)
        self._observe = observe
        self.leader = asyncio.Event()  # on the main loop: this instance leads
        self.lost = asyncio.Event()  # on the main loop: it led and stepped down
        self.election: LeaderElection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready: Future[None] = Future()
        self._stopped = False
        self.release_timeout_s = RELEASE_TIMEOUT_S

    def leading(self) -> bool:
        """Safe from any thread: the election's own rule (held, and renewed within the deadline)."""
        election = self.election
        return election is not None and election.leading()

    async def start(self) -> None:
        """Start the thread and wait until its election is set up (its API client connected)."""
        main = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, args=(main,), name="leader-election", daemon=True)
        self._thread.start()
        await asyncio.wrap_future(self._ready)

    def _run(self, main: asyncio.AbstractEventLoop) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._elect(main))
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _elect(self, main: asyncio.AbstractEventLoop) -> None:
        try:
            kube = await self._connect()
            namespace, name, identity, duration = self._args
            election = LeaderElection(
                kube,
                namespace,
                name,
                identity,
                duration,
                clock=time.monotonic,
                observe=self._observe,
            )
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            return
        self.election = election
        self._ready.set_result(None)

        async def relay(source: asyncio.Event, target: asyncio.Event) -> None:
            await source.wait()
            if not self._stopped:
                main.call_soon_threadsafe(target.set)

        relays = [asyncio.create_task(relay(election.leader, self.leader))]
        relays.append(asyncio.create_task(relay(election.lost, self.lost)))
        try:
            await election.run()  # returns once it stepped down
            await asyncio.sleep(0)  # let the relays see ``lost``
        except asyncio.CancelledError:
            pass
        finally:
            for task in relays:
                task.cancel()
            # a stop() may cancel this task while it closes (the step-down path): the thread ends either way
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await kube.close()

    async def after_next_renewal(self, within_s: float, poll_s: float = 0.02) -> None:
        """Return just after the lease's next successful renewal, so that a pause of the whole process (a
        garbage collection holds the interpreter lock, this thread's too) starts with the whole renew deadline
        ahead of it; at once if this instance does not lead, and after ``within_s`` at the latest."""
        election = self.election
        if election is None or not election.leading():
            return
        seen = election.renewals
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while election.renewals == seen and election.leading() and loop.time() < deadline:
            await asyncio.sleep(poll_s)

    async def run(self) -> None:
        """For the supervisor: returns when the election stepped down (or its thread ended)."""
        await self.lost.wait()

    async def release(self) -> None:
        """Give the lease up (a clean shutdown) and stop the thread."""
        loop, election = self._loop, self.election
        thread = self._thread
        if loop is None or election is None or loop.is_closed() or thread is None or not thread.is_alive():
            self.stop()
            return
        self._stopped = True
        if not self.lost.is_set():  # it stepped down: nothing to give up
            released: Future[None] = Future()

            def finished(_: object) -> None:
                if not released.done():
                    released.set_result(None)

            def begin() -> None:  # on the election's loop: the release is only made there, if it still runs
                loop.create_task(election.release()).add_done_callback(finished)

            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(begin)
            with contextlib.suppress(Exception):  # the timeout included: see RELEASE_TIMEOUT_S
                await asyncio.wait_for(asyncio.wrap_future(released), self.release_timeout_s)
        self.stop()

    def stop(self) -> None:
        self._stopped = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(_cancel_all, loop)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()

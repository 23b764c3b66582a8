"""Which API request goes out first when the client's slots are all taken: urgent work before background.

The operator keeps a bounded number of requests in flight (``--write-concurrency``). In a flood of new
ParallelJobs every new job needs its first status write ("Queued, waits for room"), thousands at once, and
with one first-come queue the writes that make GPUs work (an admitted job's placement, pods and binds, a
repair, a finished job freeing its GPUs) waited behind all of them: in a 50,000-job flood a bind waited 68 s
on average and 1,600 GPUs held by admitted jobs ran 152 of them. :class:`Lanes` hands a free slot to the
longest-waiting urgent request, and to a background one when no urgent request waits, the way
kube-apiserver's priority and fairness puts a controller's own traffic in levels; but every
``BACKGROUND_SHARE``-th slot handed over goes to a waiting background request even then, so a steady stream
of binds cannot starve the status writes for good (in the flood it did: ~40,000 new jobs had no status
after 12 minutes, and every queue line, its head unwritten, was decided again on every pass). What counts as background
is said by the caller through :data:`BACKGROUND` (a context variable, so every request of one job's chain,
and of the tasks it starts, is in the chain's lane); the default is urgent.

Within the urgent lane a waiting request of an older chain goes first (:data:`CHAIN`, set by the executor
for each job's chain): with the lane in plain arrival order, a wave of gangs admitted in one pass had every
gang's creates queued before any gang's binds (a bind is sent when its pod's create answers), so all of
them became whole together at the end of the wave, none sooner; ordered by chain, they become whole one
after another and the first can start while the last is still being bound. A chain that mends or ends a
running gang (``new_chain(mends=True)``: replacing pods lost with a node, a finished job's status) goes
before every chain that places a new one: a gang whose node failed in the middle of a wave of 45 new
gangs waited for the whole wave, 12-15 s, while its surviving pods held their GPUs idle. A request outside
any chain counts as a chain of its own begun when it asked.

Going first in the client is not enough for a repair: its writes go out one after another (its placement,
in DRA mode the claim and the claim's allocation, the pod, the binding), and each waits at the API server
behind every request the wave has in flight, 96 of them; on two cores a DRA repair 1 s into a wave of
10 x 40 new pods took 1.7-3.5 s. While a chain that puts pods back into a running gang is open
(:meth:`Lanes.repairing`), requests of other chains get a slot only while fewer than ``limit //
REPAIR_SHARE`` of theirs are in flight, so the server answers the repair's requests sooner; the rest of the
wave waits in its lanes until the repair is done, or ``REPAIR_HOLD_S`` has passed (a repair whose request
hangs until the client's timeout, retried, would otherwise slow everything else for minutes).

Ahead of all go the pages of a list (``slot(first=True)``). While a kind is listed its watch is stopped, so
the operator sees nothing of it but its own writes' answers until the last page is in; queued behind the
writes, a 50,000-job list's 100 pages came ~30 s apart in a flood (a list of ~40 minutes). They are few,
so they take nothing from the writes that matters.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

# True while the running chain only records what a waiting job is waiting for (or posts an Event): its
# requests yield their turn to any urgent request.
BACKGROUND: contextvars.ContextVar[bool] = contextvars.ContextVar("paralleljob_background_request", default=False)
BACKGROUND_SHARE = 4  # one slot in this many goes to background work while both lanes wait
REPAIR_SHARE = 8  # while a repair runs, other chains keep at most this share of the slots in flight
REPAIR_HOLD_S = 5.0  # ... but no longer than this per repair: one whose request hangs does not hold them for good
# The chain the running request belongs to (from :func:`new_chain`: older chains have smaller numbers); None
# outside any chain.
CHAIN: contextvars.ContextVar[int | None] = contextvars.ContextVar("paralleljob_request_chain", default=None)
_sequence = itertools.count(1)  # chains and requests share it: a request outside a chain sorts as one begun then


MENDING = 1 << 62  # taken off a mending chain's number: it sorts before every other chain, by age among them


def new_chain(mends: bool = False) -> int:
    """A number for a chain begun now, above every one before it of its kind; a chain that ``mends`` a
    running gang sorts before all that do not."""
    number = next(_sequence)
    return number - MENDING if mends else number


def _mends(chain: int | None) -> bool:
    return chain is not None and chain < 0


class Lanes:
    """A semaphore of ``limit`` slots with two queues of waiters: urgent first, by chain then arrival;
    background in arrival order. While a repair runs, requests outside mending chains (and list pages)
    are held to ``limit // REPAIR_SHARE`` in flight."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self.handed = 0  # releases so far: every BACKGROUND_SHARE-th serves the background lane first
        self.urgent: list[tuple[int, int, asyncio.Future[None]]] = []  # a heap: (chain, arrival, waiter)
        self.background: deque[asyncio.Future[None]] = deque()
        self.first: deque[asyncio.Future[None]] = deque()  # list pages: ahead of both lanes
        self.repairs = 0  # repair chains holding the others back now (:meth:`repairing`)
        self.repairs_begun = 0  # ever (for /metrics)
        self.others = 0  # requests in flight that a repair holds back: neither a mending chain's nor a page
        self.others_while_repairing = max(1, limit // REPAIR_SHARE)

    @contextmanager
    def repairing(self) -> Iterator[None]:
        """Around a chain that puts pods back into a running gang: other chains' requests are held back
        while it runs, for ``REPAIR_HOLD_S`` at most, and those held get the free slots when the last
        repair ends (or stops holding)."""
        self.repairs += 1
        self.repairs_begun += 1
        holding = True

        def stop_holding() -> None:  # once: at the end of the chain or when the hold runs out
            nonlocal holding
            if holding:
                holding = False
                self.repairs -= 1
                while self.repairs == 0 and self.free > 0 and self._hand_over():
                    self.free -= 1

        timer = asyncio.get_running_loop().call_later(REPAIR_HOLD_S, stop_holding)
        try:
            yield
        finally:
            timer.cancel()
            stop_holding()

    def _holds_back(self) -> bool:
        return self.repairs > 0 and self.others >= self.others_while_repairing

    def waiting(self) -> tuple[int, int]:
        """(urgent, background) requests waiting for a slot now."""
        return (
            sum(1 for _, _, f in self.urgent if not f.done()),
            sum(1 for f in self.background if not f.done()),
        )

    @asynccontextmanager
    async def slot(self, background: bool | None = None, first: bool = False) -> AsyncIterator[None]:
        background = BACKGROUND.get() if background is None else background
        other = not first and (background or not _mends(CHAIN.get()))
        await self._acquire(background, first, other)
        try:
            yield
        finally:
            self.others -= other
            self._release()

    async def _acquire(self, background: bool, first: bool, other: bool) -> None:
        # Free slots exist only while nobody waits (a release hands its slot on), or while a repair holds
        # the others back.
        if self.free > 0 and not (other and self._holds_back()):
            self.free -= 1
            self.others += other
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if first or background:
            (self.first if first else self.background).append(waiter)
        else:
            arrival = next(_sequence)
            chain = CHAIN.get()
            heapq.heappush(self.urgent, (arrival if chain is None else chain, arrival, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.others -= other
                self._release()  # the slot was handed over just as the request was cancelled: pass it on
            raise  # a cancelled waiter left in its queue is skipped by _release

    def _release(self) -> None:
        self.handed += 1
        if not self._hand_over():
            self.free += 1

    def _hand_over(self) -> bool:
        """A slot to the next waiter that may have one now (counted as an other's where it is); False: none."""
        background_first = self.handed % BACKGROUND_SHARE == 0
        for lane in ("first", "background", "urgent") if background_first else ("first", "urgent", "background"):
            waiter = self._next_waiting(lane)
            if waiter is not None:
                waiter.set_result(None)
                return True
        return False

    def _next_waiting(self, lane: str) -> asyncio.Future[None] | None:
        """The lane's next waiter still waiting and allowed a slot, taken out of it (cancelled ones on the way
        are dropped); held-back waiters stay in their lane."""
        if lane == "urgent":
            while self.urgent:
                chain, _, waiter = self.urgent[0]
                if waiter.done():
                    heapq.heappop(self.urgent)
                    continue
                if not _mends(chain) and self._holds_back():
                    return None
                heapq.heappop(self.urgent)
                self.others += not _mends(chain)
                return waiter
            return None
        queue = self.first if lane == "first" else self.background
        while queue:
            if queue[0].done():
                queue.popleft()
                continue
            if lane == "background" and self._holds_back():
                return None
            self.others += lane == "background"
            return queue.popleft()
        return None

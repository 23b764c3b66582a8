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

Ahead of both go the pages of a list (``slot(first=True)``). While a kind is listed its watch is stopped, so
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# True while the running chain only records what a waiting job is waiting for (or posts an Event): its
# requests yield their turn to any urgent request.
BACKGROUND: contextvars.ContextVar[bool] = contextvars.ContextVar("paralleljob_background_request", default=False)
BACKGROUND_SHARE = 4  # one slot in this many goes to background work while both lanes wait
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


class Lanes:
    """A semaphore of ``limit`` slots with two queues of waiters: urgent first, by chain then arrival;
    background in arrival order."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self.handed = 0  # releases so far: every BACKGROUND_SHARE-th serves the background lane first
        self.urgent: list[tuple[int, int, asyncio.Future[None]]] = []  # a heap: (chain, arrival, waiter)
        self.background: deque[asyncio.Future[None]] = deque()
        self.first: deque[asyncio.Future[None]] = deque()  # list pages: ahead of both lanes

    def waiting(self) -> tuple[int, int]:
        """(urgent, background) requests waiting for a slot now."""
        return (
            sum(1 for _, _, f in self.urgent if not f.done()),
            sum(1 for f in self.background if not f.done()),
        )

    @asynccontextmanager
    async def slot(self, background: bool | None = None, first: bool = False) -> AsyncIterator[None]:
        await self._acquire(BACKGROUND.get() if background is None else background, first)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, background: bool, first: bool = False) -> None:
        if self.free > 0:  # free slots exist only while nobody waits (a release hands its slot on)
            self.free -= 1
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
                self._release()  # the slot was handed over just as the request was cancelled: pass it on
            raise  # a cancelled waiter left in its queue is skipped by _release

    def _release(self) -> None:
        self.handed += 1
        background_first = self.handed % BACKGROUND_SHARE == 0
        for lane in ("first", "background", "urgent") if background_first else ("first", "urgent", "background"):
            waiter = self._next_waiting(lane)
            if waiter is not None:
                waiter.set_result(None)
                return
        self.free += 1

    def _next_waiting(self, lane: str) -> asyncio.Future[None] | None:
        """The lane's next waiter still waiting, taken out of it (cancelled ones on the way are dropped)."""
        if lane == "urgent":
            while self.urgent:
                waiter = heapq.heappop(self.urgent)[2]
                if not waiter.done():
                    return waiter
            return None
        queue = self.first if lane == "first" else self.background
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                return waiter
        return None

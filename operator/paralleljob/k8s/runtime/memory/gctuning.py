"""The operator's garbage collection: young generations rarely, the whole heap on a clock, and measured.

With tens of thousands of jobs the operator holds millions of objects (stores, parsed values, the kept view).
CPython's default thresholds (700 allocations) run a young collection every few hundred objects a pass
allocates, and a full collection each time a quarter of the heap's size survived a younger one: during a
flood of job changes that was a 0.1-0.5 s stop every few seconds, counted in whatever pass was running (a
profile of the operator under a flood put a fifth of its CPU in one dataclass constructor: the allocation
that tripped the collector). Almost all that a pass allocates is freed by reference counting; what the
collector is for is the rare cycle (an exception's traceback, a cancelled task).

So: young collections every ``YOUNG_THRESHOLD`` allocations, no automatic full collection, and a scheduled
one every ``FULL_EVERY_S`` seconds from the event loop, between passes. A full collection of the whole heap
stops the process for as long as it takes to walk it (about a second per 1.5 million objects here, and the
lease renewal thread waits for it too), so after each scheduled collection the survivors are frozen
(``gc.freeze``: left out of later collections, still freed by reference counting) and the next one walks
only what was allocated since; every ``WHOLE_EVERY``-th one unfreezes first and walks everything, so a cycle
among objects that were alive when frozen lives at most that long (10 minutes). A leader starts each
collection just after its lease was renewed: a whole-heap walk of a 10,000-job drain took 3.8 s, and one
started late in a renewal period counts against the renew deadline with the renewals' own slowness. The pauses are the
histogram ``paralleljob_gc_full_collection_seconds{scope="recent"|"whole"}``.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 20_000  # allocations between generation-0 collections (CPython's default: 700)
MIDDLE_THRESHOLD = 20  # generation-0 collections between generation-1 collections (default: 10)
NEVER = 2**30  # generation-1 collections before an automatic full collection: never, in practice
FULL_EVERY_S = 60.0
WHOLE_EVERY = 10  # of the scheduled collections, every tenth walks the whole heap


def tune() -> tuple[int, int, int]:
    """Set the thresholds; returns the ones before (restored by :func:`restore`)."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, NEVER)
    return before


def restore(before: tuple[int, int, int]) -> None:
    gc.set_threshold(*before)
    gc.unfreeze()


def collect(whole: bool) -> tuple[float, int]:
    """One scheduled collection: of what was allocated since the last freeze, or of everything; then the
    survivors are frozen. Returns (seconds, unreachable objects found)."""
    started = time.perf_counter()
    if whole:
        gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    return time.perf_counter() - started, found


async def full_collections(
    observe: Callable[[str, float], None],
    every_s: float = FULL_EVERY_S,
    whole_every: int = WHOLE_EVERY,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Collect every ``every_s`` seconds, the whole heap every ``whole_every``-th time (the first included),
    reporting each pause to ``observe(scope, seconds)``; each collection starts once ``ready()`` returns (the
    runtime: just after a renewal of the leader lease)."""
    for tick in itertools.count():
        await asyncio.sleep(every_s)
        if ready is not None:
            await ready()
        whole = tick % whole_every == 0
        seconds, found = collect(whole)
        observe("whole" if whole else "recent", seconds)
        if seconds > 0.5:
            log.info("garbage collection took %.2f s (%d unreachable objects)", seconds, found)

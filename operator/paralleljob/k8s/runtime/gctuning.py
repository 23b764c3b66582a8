"""The operator's garbage collection: young generations rarely, the whole heap on a clock, and measured.

With tens of thousands of jobs the operator holds millions of objects (stores, parsed values, the kept view).
CPython's default thresholds (700 allocations) run a young collection every few hundred objects a pass
allocates, and a full collection each time a quarter of the heap's size survived a younger one: during a
flood of job changes that was a 0.1-0.5 s stop every few seconds, counted in whatever pass was running (a
profile of the operator under a flood put a fifth of its CPU in one dataclass constructor: the allocation
that tripped the collector). Almost all that a pass allocates is freed by reference counting; what the
collector is for is the rare cycle (an exception's traceback, a cancelled task).

So: young collections every ``YOUNG_THRESHOLD`` allocations, no automatic full collection, and one full
collection every ``FULL_EVERY_S`` seconds from the event loop, between passes; its pauses are the histogram
``paralleljob_gc_full_collection_seconds``. Cycles that reached the old generation live at most that long.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 20_000  # allocations between generation-0 collections (CPython's default: 700)
MIDDLE_THRESHOLD = 20  # generation-0 collections between generation-1 collections (default: 10)
NEVER = 2**30  # generation-1 collections before an automatic full collection: never, in practice
FULL_EVERY_S = 60.0


def tune() -> tuple[int, int, int]:
    """Set the thresholds; returns the ones before (restored by :func:`restore`)."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, NEVER)
    return before


def restore(before: tuple[int, int, int]) -> None:
    gc.set_threshold(*before)


async def full_collections(observe: Callable[[float], None], every_s: float = FULL_EVERY_S) -> None:
    """Collect the whole heap every ``every_s`` seconds, reporting each pause to ``observe``."""
    while True:
        await asyncio.sleep(every_s)
        started = time.perf_counter()
        found = gc.collect()
        seconds = time.perf_counter() - started
        observe(seconds)
        if seconds > 0.5:
            log.info("full garbage collection took %.2f s (%d unreachable objects)", seconds, found)

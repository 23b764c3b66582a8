"""Give the C heap's free pages back to the system now and then (glibc's ``malloc_trim``).

Objects over 512 bytes (big dicts' tables, response bodies, watch lines, the ``/metrics`` text) live in
the C library's heap, not in Python's small-object pools. glibc returns heap memory to the system on its
own only from the top of the heap, so a burst of large short-lived buffers (the status-write responses of
512 chains at once in a 50,000-job flood, each a whole job) leaves the heap's resident size at its peak
for good: in that flood it grew from 51 to 96 MB, and one ``malloc_trim(0)`` gave 27 MB of it back in
15 ms. :func:`release_free_memory` calls it every ``every_s`` seconds from the event loop (between
passes) and counts what the process's resident size fell by (``paralleljob_heap_released_bytes_total``).
Where the C library is not glibc (musl, macOS) there is nothing to call and the loop is not started.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
from collections.abc import Callable

TRIM_EVERY_S = 10.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


def resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def trim_once(trim: Callable[[], object]) -> int:
    """Trim; the bytes the resident size fell by (0 if it did not)."""
    before = resident_bytes()
    trim()
    return max(0, before - resident_bytes())


async def release_free_memory(
    trim: Callable[[], object], released: Callable[[int], None], every_s: float = TRIM_EVERY_S
) -> None:
    """Call ``trim`` (:func:`malloc_trim`'s) every ``every_s`` seconds, reporting the bytes given back."""
    while True:
        await asyncio.sleep(every_s)
        released(trim_once(trim))

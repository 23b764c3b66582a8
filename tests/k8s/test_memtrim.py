"""The operator gives its C heap's free pages back (runtime/memory/memtrim.py): real glibc ``malloc_trim`` on
memory this test frees, and the loop's report of what came back."""

from __future__ import annotations

import asyncio
import ctypes

import pytest

from paralleljob.k8s.runtime.memory import memtrim


def test_glibc_trim_gives_back_what_a_burst_of_large_buffers_left_resident() -> None:
    trim = memtrim.malloc_trim()
    if trim is None:
        pytest.skip("not glibc: the operator starts no trimming here")  # the CI image and this machine are glibc
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    # 64 MB in 16 KB blocks (heap, not mmap), touched so they are resident; keep the last one so the
    # heap's top is in use and glibc cannot give the rest back by itself
    blocks = [libc.malloc(16384) for _ in range(4096)]
    for block in blocks:
        ctypes.memset(block, 1, 16384)
    for block in blocks[:-1]:
        libc.free(block)
    released = memtrim.trim_once(trim)
    libc.free(blocks[-1])
    assert released > 32 * 2**20, f"only {released} bytes came back"


def test_the_loop_reports_each_trim() -> None:
    seen: list[int] = []

    async def run() -> None:
        task = asyncio.create_task(memtrim.release_free_memory(lambda: 0, seen.append, every_s=0.001))
        while len(seen) < 3:
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(run())
    assert seen[:3] == [0, 0, 0]

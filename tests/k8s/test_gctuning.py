"""The operator's garbage collection schedule (runtime/memory/gctuning.py): cycles are still found, recent ones at
every scheduled collection and those among frozen survivors at the whole-heap one; thresholds come back.
And how long the reconcile loop leaves to I/O after a pass (reconciler.yield_after)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from paralleljob.k8s.runtime.memory import gctuning


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_recent_cycles_go_at_each_collection_and_frozen_ones_at_the_whole_heap_walk() -> None:
    before = gctuning.tune()
    try:
        assert gc.get_threshold() == (gctuning.YOUNG_THRESHOLD, gctuning.MIDDLE_THRESHOLD, gctuning.NEVER)
        gctuning.collect(whole=True)
        recent = cycle()
        gctuning.collect(whole=False)
        assert recent() is None  # allocated since the last freeze: found at once
        survivor = Node()
        survivor.other = Node()
        survivor.other.other = survivor
        held = weakref.ref(survivor)
        gctuning.collect(whole=False)  # alive now: frozen with the rest
        del survivor
        gctuning.collect(whole=False)
        assert held() is not None  # a cycle among frozen objects waits for the whole-heap walk
        gctuning.collect(whole=True)
        assert held() is None
    finally:
        gctuning.restore(before)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_schedule_walks_the_whole_heap_first_and_then_every_tenth_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gctuning, "collect", lambda whole: (0.0, 0))  # the schedule, not the collector
    seen: list[str] = []

    async def run() -> None:
        task = asyncio.create_task(gctuning.full_collections(lambda scope, s: seen.append(scope), every_s=0.001))
        while len(seen) < 12:
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(run())
    assert seen[:12] == ["whole"] + ["recent"] * 9 + ["whole", "recent"]


def test_each_collection_waits_until_the_runtime_says_it_may_start(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def collect(whole: bool) -> tuple[float, int]:
        seen.append("collected")
        return 0.0, 0

    monkeypatch.setattr(gctuning, "collect", collect)

    async def run() -> None:
        go = asyncio.Event()

        async def ready() -> None:  # the runtime's: just after the next lease renewal
            seen.append("asked")
            await go.wait()

        task = asyncio.create_task(gctuning.full_collections(lambda scope, s: None, every_s=0.001, ready=ready))
        while "asked" not in seen:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)
        assert "collected" not in seen
        go.set()
        while "collected" not in seen:
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(run())
    assert seen[:2] == ["asked", "collected"]


def test_passes_leave_the_loop_to_their_writes_as_long_as_they_held_it() -> None:
    from paralleljob.k8s.runtime.reconciler import MAX_YIELD_S, yield_after

    assert yield_after(0.6, 0.5) == 0.6 and yield_after(0.6, 0.75) == pytest.approx(0.2)
    assert yield_after(30.0, 0.5) == MAX_YIELD_S and yield_after(0.6, 1.0) == 0.0 and yield_after(0.0, 0.5) == 0.0

"""What the benchmarks see of the API: a raw watch, and a list-then-watch loop that keeps one collection's
objects as a user's ``kubectl get -w`` would, timing each change by this process's own clock.

The benchmarks take their times from their own watch, not from the operator's metrics, so the operator is
measured the way its users see it. ``WatchTracker`` is the loop every tracker shares (resume after a watch
ends, wait for a condition); the subclasses say what an event means.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Self

from paralleljob.k8s.runtime.api import Kube


async def watch(kube: Kube, path: str, query: dict[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
    """Raw watch events ({type, object}) of ``path`` (a list URL), from now on."""
    headers = await kube._headers("application/json")
    params = {"watch": "1", "allowWatchBookmarks": "false", **(query or {})}
    response = await kube.api.rest_client.pool_manager.get(
        kube.host + path, params=params, headers=headers, timeout=None
    )
    try:
        async for line in response.content:
            if line.strip():
                yield json.loads(line)
    finally:
        response.release()


class WatchTracker:
    """Lists ``path`` and watches it from the list's version, again whenever the watch ends (a timeout, a
    reset connection); ``relisted`` gets each list, ``on_event`` each event. Use as ``async with``."""

    what = "object"  # for the restart message

    def __init__(self, kube: Kube, path: str) -> None:
        self.kube = kube
        self.path = path
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self.task = asyncio.create_task(self._run())
        await asyncio.sleep(0.3)  # let the watch open before anything is created
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _run(self) -> None:
        while True:
            try:
                items, rv = await self.kube.list(self.path)
                self.relisted(items)
                async for event in watch(self.kube, self.path, {"resourceVersion": rv or "0"}):
                    self.on_event(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                print(f"{self.what} watch restarted after {exc!r}", file=sys.stderr, flush=True)
                await asyncio.sleep(0.2)

    def relisted(self, items: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def on_event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    async def wait(self, predicate: Callable[[], bool], timeout_s: float = 120.0) -> None:
        """Until ``predicate()`` holds, checked after each change; TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("benchmark condition not reached")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 1.0))


class StateTracker(WatchTracker):
    """A tracker that reads only what each object says now: every listed object and every ADDED or MODIFIED
    event goes to :meth:`seen`; a deletion says nothing it needs."""

    def relisted(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self.seen(item)

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") in ("ADDED", "MODIFIED"):
            self.seen(event.get("object") or {})

    def seen(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

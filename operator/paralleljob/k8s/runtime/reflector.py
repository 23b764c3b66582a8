"""List-and-watch for one kind: the operator's only way in for every object it reads.

What client-go's reflector does: list (in pages, each slimmed before the next is fetched), then watch from
the list's resourceVersion with bookmarks, resume from the last seen version after a disconnect, and list
again when the server says that version is too old (410 Gone). Unlike client-go it also lists again every
``relist_seconds`` as a slow safety net: a store rule that ever dropped an event wrongly heals itself. The
net costs at most 1/``RELIST_COST_FACTOR`` of the time: a kind whose list takes long (50,000 ParallelJobs
took 67 s under a flood) is listed again that many list-lengths later, not every ``relist_seconds``.

Nodes, ParallelJobs and queues came through Kopf before; Kopf's per-event machinery (a worker per object,
settings, diff storage) cost about a millisecond per event, which at 12,500 nodes is whole seconds of
every start and re-list, and it offered nothing the operator used (no change handlers, no finalizers, no
patching of the watched objects). An optional kind (the queue CRD not installed, DRA APIs on an older
cluster, a role without the verbs) counts as listed and empty, and is tried again now and then. Its absence
is said once: at INFO when the API server does not serve it (404: a cluster without that feature, nothing
wrong; the line says what is then unavailable), at WARNING when it refuses us (403: the role lacks verbs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from paralleljob.k8s.runtime.api import ApiError, Kube

log = logging.getLogger("paralleljob.k8s")

OnList = Callable[[list[dict[str, Any]], str | None], None]
OnEvent = Callable[[str, Mapping[str, Any]], None]
Transform = Callable[[dict[str, Any]], Any]

RELIST_SECONDS = 300.0
ABSENT_RETRY_SECONDS = 30.0  # how often an optional kind that the API does not serve is tried again
WATCH_TIMEOUT_SECONDS = 300
# A safety-net re-list waits at least this many times the last list's length: a list holds the kind's
# watch, costs the API server a full read and, for a large kind, took minutes under load.
RELIST_COST_FACTOR = 20.0


@dataclass(frozen=True, slots=True)
class Watched:
    """What one reflector lists and watches: the API ``path``; how the log, its task and the list-duration
    metric name it (``name``; default: the path); a field or label selector for list and watch alike
    (``query``); whether the kind may be absent (``optional``: a 403 or 404 counts as listed and empty) and
    what its absence leaves out (``unavailable``, for the one log line); the safety net's re-list period."""

    path: str
    name: str = ""
    query: Mapping[str, str] = field(default_factory=dict)
    optional: bool = False
    unavailable: str = ""
    relist_seconds: float = RELIST_SECONDS


@dataclass(frozen=True, slots=True)
class Receiver:
    """Where a reflector hands what it reads: each full list (``on_list``) and watch event (``on_event``);
    whether the watch gets through (``on_state``, for /healthz); the store's slimming, applied to list pages
    as they arrive (``transform``); what is held while a list is fetched and merged (``listing``: the store's
    ``ObjectStore.listing``, its tombstones outlive it); each list's time, first page to merged
    (``on_listed``)."""

    on_list: OnList
    on_event: OnEvent
    on_state: Callable[[bool], None] | None = None
    transform: Transform | None = None
    listing: Callable[[], AbstractContextManager[None]] | None = None
    on_listed: Callable[[str, float], None] | None = None


class Reflector:
    def __init__(self, kube: Kube, watched: Watched, receiver: Receiver) -> None:
        self.kube = kube
        self.path = watched.path
        self.name = watched.name or watched.path
        self.on_list = receiver.on_list
        self.on_event = receiver.on_event
        self.on_state = receiver.on_state or (lambda connected: None)
        self.transform = receiver.transform
        self.optional = watched.optional
        self.unavailable = watched.unavailable
        self.relist_seconds = watched.relist_seconds
        self.relist_after = watched.relist_seconds  # this period, or RELIST_COST_FACTOR times the last list's length
        self.query = dict(watched.query)
        self.listing = receiver.listing or contextlib.nullcontext
        self.on_listed = receiver.on_listed or (lambda name, seconds: None)
        self.synced = asyncio.Event()
        self.absent = False  # an optional kind the API does not serve (said once in the log)

    async def run(self) -> None:
        version: str | None = None
        listed_at = 0.0
        delay = 0.1
        while True:
            try:
                if version is None or time.monotonic() - listed_at >= self.relist_after:
                    version = await self._list()
                    listed_at = time.monotonic()
                    if version is None:  # optional and absent
                        await asyncio.sleep(ABSENT_RETRY_SECONDS)
                        continue
                self.on_state(True)
                left = self.relist_after - (time.monotonic() - listed_at)
                timeout_s = max(1, min(WATCH_TIMEOUT_SECONDS, int(left) + 1))
                async for event in self._watch(version, timeout_s):
                    kind = event.get("type")
                    body = event.get("object") or {}
                    if kind == "ERROR":
                        if body.get("code") == 410:  # our version is compacted away: list again
                            version = None
                        break
                    version = (body.get("metadata") or {}).get("resourceVersion") or version
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.on_event(str(kind), body)
                delay = 0.1
            except ApiError as exc:
                if exc.status == 410:
                    version = None
                self.on_state(False)
                log.debug("watch of %s interrupted (%s); resuming", self.path, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _watch(self, version: str | None, timeout_s: int) -> AsyncIterator[dict[str, Any]]:
        if self.query:
            return self.kube.watch(self.path, version, timeout_s=timeout_s, query=self.query)
        return self.kube.watch(self.path, version, timeout_s=timeout_s)

    async def _list(self) -> str | None:
        """List and hand the items over; the list's version, or None for an optional kind not served."""
        started = time.monotonic()
        with self.listing():
            version = await self._list_now()
        seconds = time.monotonic() - started
        if version is not None:  # an optional kind the API does not serve was not listed
            self.relist_after = max(self.relist_seconds, RELIST_COST_FACTOR * seconds)
            self.on_listed(self.name, seconds)
            log.debug("listed %s in %.1f s", self.path, seconds)
        return version

    async def _list_now(self) -> str | None:
        try:
            if self.query:
                items, version = await self.kube.list(self.path, self.query, transform=self.transform)
            else:
                items, version = await self.kube.list(self.path, transform=self.transform)
        except ApiError as exc:
            if not (self.optional and exc.status in (403, 404)):
                raise
            if not self.absent:
                self._say_absent(exc)
            self.absent = True
            self.on_list([], None)
            self.synced.set()
            return None
        if self.absent:
            log.info("%s can be listed now", self.path)
        self.absent = False
        self.on_list(items, version)
        self.synced.set()
        return version or ""

    def _say_absent(self, exc: ApiError) -> None:
        without = f": {self.unavailable}" if self.unavailable else ""
        if exc.status == 404:  # the cluster has no such API (a feature gate off, a CRD not installed)
            log.info(
                "%s is not served by this API server%s (checked again every %.0f s)",
                self.path,
                without,
                ABSENT_RETRY_SECONDS,
            )
        else:
            log.warning("cannot list %s (%s)%s; treating it as empty and trying again later", self.path, exc, without)

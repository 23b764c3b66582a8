"""The web view's way in and way out: list-and-watch of nodes, pods, ParallelJobs, queues and Warning
Events into stores (the operator's own ``Reflector`` and ``ObjectStore``: paging, slimming, resume after a
disconnect, re-list on 410, newest-wins), and a picture rebuilt after changes and handed to every browser
as a patch.

Nothing is polled: a rebuild runs only when a watch delivered a change, at most one at a time, and changes
that arrive while one runs are folded into the next (so a burst costs one rebuild, and a browser is never
more than one rebuild behind the last event). The picture is built in a worker thread so the event loop
keeps serving streams meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from paralleljob.clitools.gpumap import build_map_and_view
from paralleljob.dashboard.model import FEED_LENGTH, patch, picture
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import GROUP, PLURAL, QUEUE_PLURAL, VERSION
from paralleljob.k8s.edge.slim import slim_node, without_managed_fields
from paralleljob.k8s.runtime.api import Kube
from paralleljob.k8s.runtime.reflector import Reflector
from paralleljob.k8s.view.clusterview import ClusterView
from paralleljob.k8s.view.store import ObjectStore

log = logging.getLogger("paralleljob.dashboard")

Body = Mapping[str, Any]
KEEP_STREAMS_BEHIND = 64  # messages a slow browser may lag before it is sent the whole picture again


def _identity(body: Body) -> Body:
    return body


class Feed:
    """Stores, their reflectors, the latest picture and the browsers' message queues."""

    def __init__(self, kube: Kube, config: TopologyConfig | None = None) -> None:
        self.kube = kube
        self.config = config or TopologyConfig()
        lean = without_managed_fields
        self.stores: dict[str, ObjectStore[Body]] = {
            "nodes": ObjectStore(_identity, slim=slim_node),
            "pods": ObjectStore(_identity, slim=lean),
            "jobs": ObjectStore(_identity, slim=lean),
            "queues": ObjectStore(_identity, slim=lean),
        }
        self.failures: deque[Body] = deque(maxlen=FEED_LENGTH)
        self.current: dict[str, Any] | None = None
        self.view: ClusterView | None = None
        self.seq = 0
        self.changed_at: float | None = None  # monotonic time of the oldest change not yet in a picture
        self.built_in_s = 0.0  # how long the latest rebuild took (for /healthz and the benchmark)
        self._dirty = asyncio.Event()
        self._streams: set[asyncio.Queue[str | None]] = set()
        self.synced = asyncio.Event()

    # ---- way in ----------------------------------------------------------------------------------------
    def reflectors(self) -> list[Reflector]:
        paths = {
            "nodes": ("/api/v1/nodes", False),
            "pods": ("/api/v1/pods", False),
            "jobs": (f"/apis/{GROUP}/{VERSION}/{PLURAL}", False),
            "queues": (f"/apis/{GROUP}/{VERSION}/{QUEUE_PLURAL}", True),
        }
        out = [
            Reflector(
                self.kube,
                path,
                self._on_list(kind),
                self._on_event(kind),
                name=kind,
                transform=self.stores[kind].slim,
                optional=optional,
            )
            for kind, (path, optional) in paths.items()
        ]
        out.append(
            Reflector(
                self.kube,
                "/api/v1/events",
                lambda items, _: self._failures(items, reset=True),
                lambda kind, body: self._failures([body]) if kind != "DELETED" else None,
                name="events",
                transform=without_managed_fields,
                optional=True,
                query={"fieldSelector": "type=Warning"},
            )
        )
        return out

    def _on_list(self, kind: str) -> Callable[[list[dict[str, Any]], str | None], None]:
        def on_list(items: list[dict[str, Any]], version: str | None) -> None:
            self.stores[kind].replace_all(items, version, slimmed=True)
            self._touch()

        return on_list

    def _on_event(self, kind: str) -> Callable[[str, Body], None]:
        def on_event(event: str, body: Body) -> None:
            store = self.stores[kind]
            changed = store.remove(body) if event == "DELETED" else store.upsert(store.slim(body), slimmed=True)
            if changed:
                self._touch()

        return on_event

    def _failures(self, events: list[dict[str, Any]] | list[Body], reset: bool = False) -> None:
        if reset:
            self.failures.clear()
        stamp = lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")  # noqa: E731
        uids = {str((e.get("metadata") or {}).get("uid")): e for e in self.failures}
        for event in sorted(events, key=stamp):
            uids.pop(str((event.get("metadata") or {}).get("uid")), None)
            uids[str((event.get("metadata") or {}).get("uid"))] = event
        self.failures = deque(sorted(uids.values(), key=stamp)[-FEED_LENGTH:], maxlen=FEED_LENGTH)
        self._touch()

    def _touch(self) -> None:
        if self.changed_at is None:
            self.changed_at = time.monotonic()
        self._dirty.set()

    # ---- the picture ---------------------------------------------------------------------------------
    def build(self) -> tuple[dict[str, Any], ClusterView]:
        gpu_map, view = build_map_and_view(
            self.stores["nodes"].values(),
            self.stores["pods"].values(),
            self.stores["jobs"].values(),
            self.config,
        )
        return picture(gpu_map, self.stores["jobs"].values(), self.stores["queues"].values(), self.failures), view

    async def run(self, reflectors: list[Reflector]) -> None:
        """Rebuild after every burst of changes, once every store has been listed."""
        await asyncio.gather(*(r.synced.wait() for r in reflectors))
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self.changed_at = None
            started = time.monotonic()
            new, view = await asyncio.to_thread(self.build)
            self.built_in_s = time.monotonic() - started
            self._publish(new, view)
            self.synced.set()

    def _publish(self, new: dict[str, Any], view: ClusterView) -> None:
        old, self.current, self.view = self.current, new, view
        change = patch(old, new) if old is not None else None
        if old is not None and change is None:
            return
        self.seq += 1
        message = (
            _sse("patch", {"seq": self.seq, **(change or {})}) if old is not None else self.snapshot_message()
        )
        for stream in list(self._streams):
            if stream.qsize() >= KEEP_STREAMS_BEHIND:  # a stalled browser: start it over rather than queue more
                while not stream.empty():
                    stream.get_nowait()
                stream.put_nowait(self.snapshot_message())
            else:
                stream.put_nowait(message)

    def snapshot_message(self) -> str:
        return _sse("snapshot", {"seq": self.seq, **(self.current or {})})

    # ---- way out -------------------------------------------------------------------------------------
    def subscribe(self) -> asyncio.Queue[str | None]:
        stream: asyncio.Queue[str | None] = asyncio.Queue()
        if self.current is not None:
            stream.put_nowait(self.snapshot_message())
        self._streams.add(stream)
        return stream

    def unsubscribe(self, stream: asyncio.Queue[str | None]) -> None:
        self._streams.discard(stream)

    def close(self) -> None:
        for stream in self._streams:
            stream.put_nowait(None)


def _sse(event: str, data: Mapping[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"

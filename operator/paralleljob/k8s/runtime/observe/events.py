"""Kubernetes Events about ParallelJobs and Nodes, posted in the background so that a slow or failing
event write never delays a bind. If the API is unreachable the oldest events are dropped, not the operator.

Repeats are aggregated as client-go's event correlator does: the same (object, type, reason, message)
within ``REPEAT_WINDOW_S`` raises the ``count`` and ``lastTimestamp`` of the Event already posted instead
of creating another one, and is logged at debug level only. So a decision that is (wrongly) repeated on
every pass cannot flood the API, the log, or crowd out other jobs' Events. Events wait for a gang's binds,
but at most ``MAX_WAIT_FOR_BINDS_S``: an operator that always has a chain in flight still posts them. That
bound holds for everything queued when the wait begins, not for each Event in turn: waiting once per Event let
a busy operator post one Event a second, so under a stream of other jobs' placements a repair's Events
queued behind them for minutes (issue 21, item 3; ``tests/e2e/operator_e2e/test_operator_events_busy.py``).

An incident's Events go ahead of routine ones: a Warning, and every Event about the same object for
``INCIDENT_WINDOW_S`` after it (a repair's Rescheduled and Repaired are Normal, and belong with the GPUFailure
that started it). One queue in arrival order put them behind hundreds of other jobs' ``Placed`` on a loaded
machine, so the Events a user reads when something breaks landed last (issue 38, item 10). An incident's
Event queued while routine ones are being posted is posted next; when the backlog is full the oldest routine
Event is dropped first. Each Event's timestamps are taken when it is queued, so ``kubectl get events`` still
lists them in the order they happened.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from paralleljob.k8s.edge.constants import API_VERSION, KIND
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.render.manifests import event
from paralleljob.k8s.runtime.api import ApiError, Kube

log = logging.getLogger("paralleljob.k8s")
MAX_BACKLOG = 1000
REPEAT_WINDOW_S = 600.0  # client-go aggregates identical events for 10 minutes
MAX_WAIT_FOR_BINDS_S = 1.0
MAX_REMEMBERED = 4096  # distinct recent events kept for aggregation; the oldest are forgotten first
INCIDENT_WINDOW_S = 600.0  # after a Warning, an object's Events go ahead of routine ones this long


class EventPoster:
    def __init__(self, kube: Kube, instance: str, busy: Callable[[], bool] = lambda: False) -> None:
        self.kube = kube
        self.busy = busy
        self.instance = instance or "paralleljob-operator"
        self.urgent: deque[dict[str, Any]] = deque()  # incidents' Events and their repeats: posted first
        self.routine: deque[dict[str, Any]] = deque()
        self.incidents: dict[tuple[str, str], float] = {}  # (namespace, uid or name) -> last Warning (monotonic)
        self.queued = asyncio.Event()
        self.counter = itertools.count()
        self.prefix = f"{os.getpid():x}{int(dt.datetime.now().timestamp()):x}"
        self.task: asyncio.Task[None] | None = None
        # (namespace, object uid or name, type, reason, message)
        #   -> [event name, count, first posted (monotonic), posted ahead of routine Events]
        self.recent: dict[tuple[str, ...], list[Any]] = {}
        self.dropped = 0
        self.repeats: dict[str, int] = {}  # Event name -> count still to be written

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run(), name="paralleljob-events")

    def _now(self) -> str:
        return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _put(self, involved: Mapping[str, str], event_type: str, reason: str, message: str) -> None:
        key = (involved.get("namespace", ""), involved.get("uid") or involved["name"], event_type, reason, message)
        seen = self.recent.get(key)
        now = time.monotonic()
        urgent = self._in_incident(key[:2], event_type == "Warning", now)
        if seen is not None and now - seen[2] < REPEAT_WINDOW_S:
            seen[1] += 1
            log.debug("%s %s/%s: %s (%d times): %s", event_type, key[0], involved["name"], reason, seen[1], message)
            if seen[0] not in self.repeats:  # one update in the queue per Event, carrying the latest count
                repeat = {"repeat": seen[0], "namespace": involved.get("namespace") or "default"}
                self._enqueue(repeat, seen[3])  # its Event's lane: a repeat must not overtake the Event
            self.repeats[seen[0]] = seen[1]
            return
        log.info("%s %s/%s: %s: %s", event_type, involved.get("namespace", ""), involved["name"], reason, message)
        suffix = f"{self.prefix}{next(self.counter):x}"
        body = event(involved, event_type, reason, message, self._now(), suffix, self.instance)
        self.recent.pop(key, None)
        self.recent[key] = [body["metadata"]["name"], 1, now, urgent]
        while len(self.recent) > MAX_REMEMBERED:
            del self.recent[next(iter(self.recent))]
        self._enqueue(body, urgent)

    def _in_incident(self, about: tuple[str, str], warning: bool, now: float) -> bool:
        if warning:
            self.incidents.pop(about, None)
            self.incidents[about] = now
            while len(self.incidents) > MAX_REMEMBERED:
                del self.incidents[next(iter(self.incidents))]
            return True
        since = self.incidents.get(about)
        return since is not None and now - since < INCIDENT_WINDOW_S

    def backlog(self) -> int:
        return len(self.urgent) + len(self.routine)

    def _enqueue(self, item: dict[str, Any], urgent: bool) -> None:
        if self.backlog() >= MAX_BACKLOG:
            (self.routine or self.urgent).popleft()
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("%d Events dropped: the API server did not take them in time", self.dropped)
        (self.urgent if urgent else self.routine).append(item)
        self.queued.set()

    def about_job(self, job: JobObject, event_type: str, reason: str, message: str) -> None:
        involved = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": job.name,
            "namespace": job.namespace,
            "uid": job.uid,
        }
        self._put(involved, event_type, reason, message)

    def about_node(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = body.get("metadata") or {}
        involved = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": str(meta.get("name", "")),
            "uid": str(meta.get("uid", "")),
        }
        self._put(involved, event_type, reason, message)

    async def _run(self) -> None:
        while True:
            await self.queued.wait()
            self.queued.clear()
            waited = 0.0
            while self.busy() and waited < MAX_WAIT_FOR_BINDS_S:  # events wait for a gang's binds, a bounded time
                await asyncio.sleep(0.05)
                waited += 0.05
            # What queued meanwhile has waited too: one wait for all of it. Routine Events queued after this
            # point wait for the next round; an incident's never wait behind them.
            routine_due = len(self.routine)
            while self.urgent or routine_due:
                if self.urgent:
                    item = self.urgent.popleft()
                else:
                    item = self.routine.popleft()
                    routine_due -= 1
                try:
                    await self._post(item)
                except ApiError as exc:
                    log.debug("event not posted: %s", exc)
                routine_due = min(routine_due, len(self.routine))  # the full backlog may have dropped some
            if self.backlog():
                self.queued.set()

    async def _post(self, item: dict[str, Any]) -> None:
        if "repeat" not in item:
            namespace = item["metadata"]["namespace"]
            await self.kube.request("POST", f"/api/v1/namespaces/{namespace}/events", item)
            return
        # A repeat of a posted Event: its count and last time move (a 404 means it was never posted or has
        # expired; the next repeat after the window posts a fresh one).
        count = self.repeats.pop(item["repeat"], None)
        if count is None:
            return
        path = f"/api/v1/namespaces/{item['namespace']}/events/{item['repeat']}"
        await self.kube.merge_patch(path, {"count": count, "lastTimestamp": self._now()})

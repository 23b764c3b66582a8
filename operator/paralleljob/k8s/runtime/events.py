"""Kubernetes Events about ParallelJobs and Nodes, posted in the background so that a slow or failing
event write never delays a bind. If the API is unreachable the oldest events are dropped, not the operator."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from paralleljob.k8s.edge.constants import API_VERSION, KIND
from paralleljob.k8s.edge.manifests import event
from paralleljob.k8s.edge.specs import JobObject
from paralleljob.k8s.runtime.api import ApiError, Kube

log = logging.getLogger("paralleljob.k8s")
MAX_BACKLOG = 1000


class EventPoster:
    def __init__(self, kube: Kube, instance: str, busy: Callable[[], bool] = lambda: False) -> None:
        self.kube = kube
        self.busy = busy
        self.instance = instance or "paralleljob-operator"
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.counter = itertools.count()
        self.prefix = f"{os.getpid():x}{int(dt.datetime.now().timestamp()):x}"
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run(), name="paralleljob-events")

    def _now(self) -> str:
        return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _put(self, involved: Mapping[str, str], event_type: str, reason: str, message: str) -> None:
        log.info("%s %s/%s: %s: %s", event_type, involved.get("namespace", ""), involved["name"], reason, message)
        if self.queue.qsize() >= MAX_BACKLOG:
            self.queue.get_nowait()
        suffix = f"{self.prefix}{next(self.counter):x}"
        self.queue.put_nowait(event(involved, event_type, reason, message, self._now(), suffix, self.instance))

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
            body = await self.queue.get()
            while self.busy():  # events wait for a gang's creates and binds, never the other way round
                await asyncio.sleep(0.05)
            namespace = body["metadata"]["namespace"]
            try:
                await self.kube.request("POST", f"/api/v1/namespaces/{namespace}/events", body)
            except ApiError as exc:
                log.debug("event not posted: %s", exc)

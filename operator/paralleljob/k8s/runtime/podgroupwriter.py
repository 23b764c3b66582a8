"""Writes the scheduling-cycle condition (``PodGroupScheduled``, or ``PodGroupInitiallyScheduled`` in v1beta1)
of the Kubernetes PodGroups the operator places, and ``CompositePodGroupInitiallyScheduled`` of the
CompositePodGroups it places as one gang (the decision is ``plan/groups/podgroupstatus.py``'s;
docs/pod-groups.md "Kubernetes PodGroups").

In the background, one batch at a time: a pass that finds the previous batch still going leaves the next to a
later pass, which finds the condition still stale if a write failed (level-triggered, nothing to remember).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from paralleljob.k8s.edge.parse.compositegroups import KIND as COMPOSITE_KIND
from paralleljob.k8s.edge.parse.compositegroups import CompositeGroup, composite_status_path
from paralleljob.k8s.edge.parse.nativegroups import NativeGroup, pod_group_status_path
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.plan.groups.podgroupstatus import (
    PodGroupCondition,
    pod_group_conditions,
    refusal_conditions,
)
from paralleljob.k8s.runtime.api import ApiError, Kube
from paralleljob.k8s.view.store import ObjectStore

log = logging.getLogger("paralleljob.k8s")


class PodGroupStatusWriter:
    def __init__(self, kube: Kube, store: ObjectStore[NativeGroup], composites: ObjectStore[CompositeGroup]) -> None:
        self.kube = kube
        self.store = store
        self.composites = composites
        self.task: asyncio.Task[None] | None = None

    def update(self, jobs: Sequence[JobObject], groups: Mapping[str, NativeGroup], refused: Mapping[str, str]) -> None:
        if self.task is not None and not self.task.done():
            return
        changes = pod_group_conditions(jobs, groups) + refusal_conditions(refused, groups)
        if changes:
            self.task = asyncio.create_task(self._write(changes), name="podgroup-status")

    async def _write(self, changes: list[PodGroupCondition]) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for change in changes:
            version = change.api_version.rsplit("/", 1)[-1]
            composite = change.kind == COMPOSITE_KIND
            store: ObjectStore[Any] = self.composites if composite else self.store
            status_path = composite_status_path if composite else pod_group_status_path
            path = status_path(change.namespace, change.name, version)
            body = store.body(change.namespace, change.name) or {}
            # a merge patch replaces the list: keep the conditions others wrote (DisruptionTarget)
            conditions = (body.get("status") or {}).get("conditions") or []
            others = [c for c in conditions if c.get("type") != change.condition_type]
            patch = {"metadata": {"uid": change.uid}, "status": {"conditions": [*others, change.condition(now)]}}
            try:
                store.upsert(await self.kube.merge_patch(path, patch))
            except ApiError as exc:
                log.debug("status of %s %s/%s not written: %s", change.kind, change.namespace, change.name, exc)

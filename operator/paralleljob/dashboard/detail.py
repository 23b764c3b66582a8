"""One job as the web view's side panel shows it when it is clicked (pure): ``paralleljob describe``'s
description (placement by rank, cost, conditions, events, last failure) plus what only the topology tells:
the bytes each step moves over every topology level (which levels its TP, PP and DP traffic crosses) and
the cost no placement on this topology could beat, next to the recorded cost.

Both numbers come from the core the scheduler decides with (``core.traffic``, ``Placer.lower_bound`` on an
empty copy of the cluster), so the panel shows the scheduler's own arithmetic, not a second estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from paralleljob.clitools.describe import describe_job
from paralleljob.core.cluster import ClusterState
from paralleljob.core.cost import cost_model
from paralleljob.core.placer import Placer
from paralleljob.core.traffic import level_bytes_per_step
from paralleljob.k8s.edge.specs import parse_job
from paralleljob.k8s.view.clusterview import ClusterView

REPAIR_REASONS = ("Repair", "Recover", "Failure", "Replace", "Migrat", "Reoptimi")


def job_detail(
    body: Mapping[str, Any],
    view: ClusterView | None,
    pods: Iterable[Mapping[str, Any]] = (),
    events: Iterable[Mapping[str, Any]] = (),
    claims: Iterable[Mapping[str, Any]] = (),
    slices: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """``claims`` and ``slices``: on a DRA cluster, each pod's line names the devices its claims hold."""
    description = describe_job(body, pods, events, claims, slices)
    out = description.to_json()
    job = parse_job(body)
    out["levels"] = []
    out["lowerBoundMs"] = None
    out["repairs"] = [e for e in out["events"] if any(word in e["reason"] for word in REPAIR_REASONS)]
    if view is None or view.empty or job.request is None:
        return out
    topology, model = view.topology, cost_model(job.request.cost_model)
    bound = Placer(ClusterState(topology)).lower_bound(job.request.spec, model)
    out["lowerBoundMs"] = None if math.isinf(bound) else round(bound, 6)
    record = job.record
    if record is None:
        return out
    groups: list[list[int]] = []
    for slot in record.slots:
        ids = [view.gpu_id(slot.node, index) for index in slot.gpu_indices]
        if any(g is None for g in ids):
            return out  # a node of the record is gone: no traffic to measure until the repair
        groups.append([g for g in ids if g is not None])
    per_level = level_bytes_per_step(topology, job.request.spec, groups, model)
    out["levels"] = [
        {"level": topology.levels[i].name, "bytesPerStep": round(b), "bandwidthGBps": topology.level_bandwidth(i)}
        for i, b in enumerate(per_level)
        if b > 0
    ]
    return out

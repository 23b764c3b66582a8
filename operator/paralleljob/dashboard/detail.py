"""One job as the web view's side panel shows it when it is clicked (pure): ``paralleljob describe``'s
description (placement by rank, cost, conditions, events, last failure) plus what only the topology tells:
the bytes each step moves over every topology level (which levels its TP, PP and DP traffic crosses) and
the cost no placement on this topology could beat, next to the recorded cost.

Both numbers come from the core the scheduler decides with (``core.timing.traffic``, ``Placer.lower_bound`` on an
empty copy of the cluster), so the panel shows the scheduler's own arithmetic, not a second estimate. The
bound is for the job as it was priced: the shape its record holds (an elastic job at its current replicas),
with the record's cost model, on the topology the operator priced it on (for a whole-tray placement the
cliques at NVLink bandwidth, ``trayadmission.nvlink_topology``). When that topology is not the one
in view (a node of the placement is gone, so the view holds a label-less ghost of it), the bound would be for
another cluster, and could exceed the recorded cost: the panel then shows none and says why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from paralleljob.clitools.describe import describe_job
from paralleljob.core.cluster import ClusterState
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.timing.traffic import level_bytes_per_step
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.records import record_groups
from paralleljob.k8s.plan.admission.trayadmission import nvlink_topology
from paralleljob.k8s.plan.kinds.picker import at_current_size
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
    job = at_current_size(parse_job(body))
    out["levels"] = []
    out["lowerBoundMs"] = None
    out["lowerBoundWhy"] = ""
    out["repairs"] = [e for e in out["events"] if any(word in e["reason"] for word in REPAIR_REASONS)]
    if view is None or view.empty or job.request is None:
        return out
    record, spec = job.record, job.request.spec
    model = cost_model(record.cost_model if record else job.request.cost_model)
    # a whole-tray placement was priced with its cliques at NVLink bandwidth (its ComputeDomains make it so)
    topology = (nvlink_topology(view) if record is not None and record.trays else None) or view.topology
    gone = [node for node in record.nodes if node not in view.nodes] if record else []
    if gone:
        out["lowerBoundWhy"] = f"node {gone[0]} of the placement is not in the cluster: no bound until the repair"
        return out  # and no traffic to measure either
    bound = Placer(ClusterState(topology)).lower_bound(spec, model)
    out["lowerBoundMs"] = None if math.isinf(bound) else round(bound, 6)
    if record is None:
        return out
    groups: list[list[int]] = []
    for names in record_groups(record):  # GPU names "node/index" of each TP group, either layout
        ids = [view.gpu_id(*_node_and_index(name)) for name in names]
        if any(g is None for g in ids):
            return out  # a GPU of the record is not in view: no traffic to measure until the repair
        groups.append([g for g in ids if g is not None])
    per_level = level_bytes_per_step(topology, spec, groups, model)
    out["levels"] = [
        {"level": topology.levels[i].name, "bytesPerStep": round(b), "bandwidthGBps": topology.level_bandwidth(i)}
        for i, b in enumerate(per_level)
        if b > 0
    ]
    return out


def _node_and_index(gpu_name: str) -> tuple[str, int]:
    node, _, index = gpu_name.rpartition("/")
    return node, int(index)

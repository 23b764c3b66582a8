"""Checkpoint advice for a job's status: the pipeline boundary to cut at and, when the job says how long a
checkpoint takes, the Young/Daly interval for its size and the cluster's failure rate."""

from __future__ import annotations

from typing import Any

from paralleljob.core.failure.checkpoint import checkpointable_boundary, job_mtbf_seconds, young_daly_interval_seconds
from paralleljob.k8s.edge.parse.specs import JobRequest

# Interruptions per 1000 node-days when the job gives none: about what large training fleets report
# (e.g. Llama 3's 419 interruptions in 54 days on ~2000 nodes is ~3.9).
DEFAULT_FAILURES_PER_1000_NODE_DAYS = 4.0


def checkpoint_status(request: JobRequest, nodes: int) -> dict[str, Any]:
    spec = request.spec
    out: dict[str, Any] = {"boundaryStage": checkpointable_boundary(spec.pp)}
    ck = request.checkpoint
    if ck.cost_seconds and nodes >= 1:
        rate = ck.failures_per_1000_node_days or DEFAULT_FAILURES_PER_1000_NODE_DAYS
        mtbf = job_mtbf_seconds(nodes, rate)
        out["suggestedIntervalSeconds"] = round(young_daly_interval_seconds(ck.cost_seconds, mtbf), 1)
    return out

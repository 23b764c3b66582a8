"""``paralleljob describe JOB`` as data (pure): the job's shape and phase, its placement rank by rank, the
communication cost terms, conditions, the last failure and its events, oldest first.

The placement comes from the operator's own record parser (``record_from_status`` through ``parse_job``),
and ranks from :meth:`PlacementRecord.to_status`, the same numbers the pods get in their environment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from paralleljob.k8s.specs import parse_job


@dataclass(frozen=True)
class PodLine:
    name: str
    node: str
    gpu_indices: tuple[int, ...]
    ranks: tuple[int, ...]
    replica: int
    stage: int
    node_rank: int
    pod_phase: str  # from the Pod object; "" when it does not exist (yet)


@dataclass(frozen=True)
class EventLine:
    time: str
    type: str
    reason: str
    message: str
    count: int


@dataclass(frozen=True)
class JobDescription:
    key: str
    phase: str
    shape: str
    gpus: int
    queue: str
    priority: int
    strategy: str
    rank_order: str  # the recorded one once placed (the pods' numbering), else the spec's
    restarts: int
    message: str
    invalid: str
    record_error: str
    epoch: int | None
    cost: dict[str, Any]
    reasons: tuple[str, ...]
    pods: tuple[PodLine, ...]
    conditions: tuple[dict[str, Any], ...]
    last_failure: dict[str, Any]
    events: tuple[EventLine, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _event_time(event: Mapping[str, Any]) -> str:
    meta = event.get("metadata") or {}
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or meta.get("creationTimestamp")
        or ""
    )


def describe_job(
    body: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] = (), events: Iterable[Mapping[str, Any]] = ()
) -> JobDescription:
    job = parse_job(body)
    phases = {
        str((p.get("metadata") or {}).get("name", "")): str((p.get("status") or {}).get("phase") or "Pending")
        for p in pods
        if not (p.get("metadata") or {}).get("deletionTimestamp")
    }
    lines: list[PodLine] = []
    if job.record is not None:
        for item in job.record.to_status()["pods"]:
            lines.append(
                PodLine(
                    name=item["name"],
                    node=item["node"],
                    gpu_indices=tuple(item["gpuIndices"]),
                    ranks=tuple(item["ranks"]),
                    replica=item["replica"],
                    stage=item["stage"],
                    node_rank=item["nodeRank"],
                    pod_phase=phases.get(item["name"], ""),
                )
            )
        lines.sort(key=lambda line: line.node_rank)
    request = job.request
    shape, gpus = "", 0
    if request is not None:
        shape, gpus = f"TP{request.spec.tp} x PP{request.spec.pp} x DP{request.spec.dp}", request.spec.num_gpus
    event_lines = sorted(
        (
            EventLine(
                _event_time(e),
                str(e.get("type", "")),
                str(e.get("reason", "")),
                str(e.get("message", "")),
                int(e.get("count") or 1),
            )
            for e in events
        ),
        key=lambda e: e.time,
    )
    status = job.status
    conditions = tuple(dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping))
    return JobDescription(
        key=job.key,
        phase=job.phase.value,
        shape=shape,
        gpus=gpus,
        queue=request.queue if request else "",
        priority=request.priority if request else 0,
        strategy=request.failure.strategy.value if request else "",
        rank_order=(job.record.rank_order if job.record else request.rank_order).value if request else "",
        restarts=job.restarts,
        message=str(status.get("message") or ""),
        invalid=job.invalid,
        record_error=job.record_error,
        epoch=job.record.epoch if job.record else None,
        cost=dict(status.get("communicationCost") or {}),
        reasons=job.record.reasons if job.record else (),
        pods=tuple(lines),
        conditions=conditions,
        last_failure=dict(status.get("lastFailure") or {}),
        events=tuple(event_lines),
    )

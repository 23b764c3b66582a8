"""The operator's objects as the core's queueing inputs (pure): a ParallelJobQueue parsed into ``QueueInfo``
and mapped to ``QueueSpec``, queued ParallelJobs -> ``PendingJob``, placed ones -> ``RunningJob``, and the
``--queue-policy`` flag -> ``QueuePolicy``.

Times are seconds since the epoch, read from the RFC 3339 stamps the operator writes (``queuedAt``,
``startTime``) so every pass, and every operator after a restart, sees the same numbers.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.core.admit.fifo import DEFAULT_REQUEUE_ORDER, RequeueOrder, keeps_place
from paralleljob.core.admit.queueing import PendingJob, QueuePolicy, QueueSpec, RunningJob
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.failure.repair import FailureKind
from paralleljob.core.moves import MoveBounds
from paralleljob.k8s.edge.constants import DEFAULT_QUEUE, LAST_CHECKPOINT_ANNOTATION, QUEUE_POLICIES
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest

DEFAULT_MOVE_BOUNDS = MoveBounds()


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    weight: float = 1.0
    guaranteed_gpus: int = 0
    max_gpus: int | None = None
    namespaces: tuple[str, ...] = ()
    # Warm spare trays per NVLink clique this queue's jobs leave free (None: the topology setting's)
    nvlink_spares: int | None = None
    # Where a job requeued after its hardware broke stands (spec.requeueOrder; core.admit.fifo.keeps_place)
    requeue_order: RequeueOrder = DEFAULT_REQUEUE_ORDER
    # Moving running jobs to free a domain for a waiting one (spec.moves; core.moves): the disruption budget
    # and the cost bound; a queue without the field gets the core's defaults (moves on)
    moves: MoveBounds = DEFAULT_MOVE_BOUNDS
    # The status fields as last written ((field, value) pairs), so the pass can tell which queues' status
    # is out of date without the shell comparing bodies.
    status: tuple[tuple[str, float], ...] = ()


QUEUE_STATUS_FIELDS = ("gpusInUse", "running", "waiting", "dominantShare")


def parse_queue(body: Mapping[str, object]) -> QueueInfo:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    assert isinstance(metadata, Mapping) and isinstance(spec, Mapping)
    max_gpus = spec.get("maxGPUs")
    weight = spec.get("weight", 1.0)
    guaranteed = spec.get("guaranteedGPUs", 0)
    namespaces = spec.get("namespaces") or []
    spares = spec.get("nvlinkSparesPerClique")
    order = spec.get("requeueOrder")
    status = body.get("status") or {}
    shown = tuple(
        (key, float(value))
        for key in QUEUE_STATUS_FIELDS
        if isinstance(status, Mapping) and isinstance(value := status.get(key), int | float)
    )
    return QueueInfo(
        name=str(metadata.get("name", "")),
        weight=float(weight) if isinstance(weight, int | float) and weight > 0 else 1.0,
        guaranteed_gpus=guaranteed if isinstance(guaranteed, int) else 0,
        max_gpus=max_gpus if isinstance(max_gpus, int) else None,
        namespaces=tuple(str(n) for n in namespaces) if isinstance(namespaces, list) else (),
        nvlink_spares=spares if isinstance(spares, int) and spares >= 0 else None,
        # the CRD admits only these values; an older API server's object without the field keeps its place
        requeue_order=RequeueOrder(order) if order in [o.value for o in RequeueOrder] else DEFAULT_REQUEUE_ORDER,
        status=shown,
        moves=move_bounds(spec.get("moves")),
    )


def move_bounds(moves: object) -> MoveBounds:
    """``spec.moves`` (``perHour``: moves per hour, 0 turns them off; ``maxExtraCostRatio``: how much dearer
    a moved job's new placement may be); a value the CRD would refuse keeps the default."""
    base = DEFAULT_MOVE_BOUNDS
    if not isinstance(moves, Mapping):
        return base
    per_hour = moves.get("perHour")
    ratio = moves.get("maxExtraCostRatio")
    return dataclasses.replace(
        base,
        max_moves_per_hour=per_hour if isinstance(per_hour, int) and per_hour >= 0 else base.max_moves_per_hour,
        max_extra_cost_ratio=float(ratio)
        if isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0 <= ratio < math.inf
        else base.max_extra_cost_ratio,
    )


def requeue_stamp(queue: QueueInfo | None, kind: FailureKind, queued_at: str, now: str) -> str:
    """``status.queuedAt`` of a job requeued with no room after a failure of ``kind``: its old stamp when it
    keeps its place (``core.admit.fifo.keeps_place``: a drain always, broken hardware when its queue's
    ``requeueOrder`` is KeepPlace, the default, a queue without an object too), else ``now``, the back."""
    order = queue.requeue_order if queue is not None else DEFAULT_REQUEUE_ORDER
    return queued_at if queued_at and keeps_place(order, kind) else now


def parse_time(value: object) -> float | None:
    """An RFC 3339 stamp (``2024-01-01T00:00:00Z``) as epoch seconds; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    return _parse_stamp(value)


# The API stamps whole seconds, so a flood of 50,000 jobs carries a few hundred distinct stamps, and a pass
# read them all (queue times, the oldest in each line): parsing each again was 4% of a busy operator's CPU.
@functools.lru_cache(maxsize=16384)
def _parse_stamp(value: str) -> float | None:
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def format_time(seconds: float) -> str:
    """Epoch seconds as the RFC 3339 stamp the API stores (whole seconds, rounded up: never early)."""
    return dt.datetime.fromtimestamp(math.ceil(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def queue_policy(name: str, grace_period_s: float) -> QueuePolicy | None:
    """The core policy for a ``--queue-policy`` value; None for ``strict-fifo`` (the operator's own FIFO)."""
    if name not in QUEUE_POLICIES:
        raise InvalidRequest(f"--queue-policy must be one of {', '.join(QUEUE_POLICIES)}, got {name!r}")
    if not (grace_period_s >= 0 and math.isfinite(grace_period_s)):
        raise InvalidRequest(f"--preemption-grace-seconds must be >= 0, got {grace_period_s}")
    if name == "strict-fifo":
        return None
    return QueuePolicy(
        ordering="priority",
        fair_share=True,
        backfill=name != "fair",
        preemption=name == "fair-backfill-preempt",
        grace_period_s=grace_period_s,
    )


def queue_spec(info: QueueInfo) -> QueueSpec:
    """A ParallelJobQueue as the core's queue. The API's CEL rules keep the values sane; anything that
    slipped past them (an object stored before the rules) is made consistent rather than refused."""
    weight = info.weight if info.weight > 0 and math.isfinite(info.weight) else 1.0
    guaranteed = max(0, info.guaranteed_gpus)
    cap = None if info.max_gpus is None else max(0, info.max_gpus)
    if cap is not None:
        guaranteed = min(guaranteed, cap)
    return QueueSpec(info.name or DEFAULT_QUEUE, weight, guaranteed, cap, info.namespaces)


def pending_job(job: JobObject, request: JobRequest, now_s: float) -> PendingJob:
    """A queued job keeps its place: it was submitted when it (re)entered the queue (``queuedAt``); one that ran
    before is never failed as unplaceable (the room it misses is broken hardware, to be repaired)."""
    submitted = parse_time(job.queued_at) or now_s
    return PendingJob(request.spec, request.queue, submitted, request.expected_runtime_s, ran_before=job.ever_ran)


def last_checkpoint(job: JobObject, request: JobRequest, started: float, now_s: float) -> float | None:
    """When the job last checkpointed: the job's own annotation when it keeps one, else the latest multiple
    of ``checkpoint.intervalSeconds`` since it started, else None (all work since the start is at risk)."""
    stamp = parse_time(job.annotations.get(LAST_CHECKPOINT_ANNOTATION))
    if stamp is not None:
        return min(stamp, now_s)
    interval = request.checkpoint.interval_seconds
    if interval and now_s > started:
        return started + math.floor((now_s - started) / interval) * interval
    return None


def running_job(job: JobObject, request: JobRequest, now_s: float, preemptible: bool) -> RunningJob:
    """A job holding GPUs. ``preemptible`` is the caller's say (only a Running job not already being
    preempted may be chosen); ``spec.preemptible: false`` always wins."""
    started = parse_time(job.status.start_time) or now_s
    end = started + request.expected_runtime_s if request.expected_runtime_s is not None else None
    return RunningJob(
        request.spec,
        request.queue,
        started,
        last_checkpoint(job, request, started, now_s),
        end,
        preemptible and request.preemptible,
    )


def preemption_of(status: Mapping[str, Any]) -> tuple[float, str] | None:
    """A pending preemption recorded on a victim's status: (deadline, the job it makes room for)."""
    data = status.get("preemption")
    if not isinstance(data, Mapping):
        return None
    deadline = parse_time(data.get("deadline"))
    if deadline is None:
        return None
    return deadline, str(data.get("for") or "")

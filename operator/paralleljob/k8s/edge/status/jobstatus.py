"""A ParallelJob's ``status`` parsed once, at the edge, into a frozen value with every default in one place.

The plan reads these fields instead of looking into the raw mapping with its own default each time (the
placement epoch used to be read with three). ``raw`` is kept only for writing: a pass's ``StatusDraft``
starts from it and the executor merge-patches the difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paralleljob.core.lifecycle import Phase

NO_CONDITION: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class JobStatus:
    raw: Mapping[str, Any] = field(default_factory=dict)
    phase: Phase = Phase.PENDING  # an unknown phase reads as Pending (the next pass writes a real one)
    restarts: int = 0
    drops: int = 0  # an elastic job's failures carried out by dropping replicas (status.elastic.drops)
    placement_epoch: int = 0  # placements the job has had; the next one is this plus one
    queued_at: str = ""  # when it (re)entered the queue; "" if never written (JobObject.queued_at: its creation)
    start_time: str = ""  # when it last started running; "" if it never has
    conditions: tuple[Mapping[str, Any], ...] = ()
    # pod name -> the incarnation of its slot that exited 0 (status.succeededPods): a finished rank is not run
    # again when its pod is gone (plan/pods/finished.py)
    succeeded_pods: Mapping[str, int] = field(default_factory=dict)

    def condition(self, kind: str) -> Mapping[str, Any]:
        """The condition of type ``kind``; an empty mapping when there is none."""
        return next((c for c in self.conditions if c.get("type") == kind), NO_CONDITION)

    @property
    def ever_ran(self) -> bool:
        return bool(self.start_time) or self.restarts > 0


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_status(status: object, record_epoch: int | None) -> JobStatus:
    """``status`` of a ParallelJob object. ``record_epoch``: its placement record's epoch, the epoch of a
    job whose status predates ``placementEpoch``."""
    raw: Mapping[str, Any] = status if isinstance(status, Mapping) else {}
    try:
        phase = Phase(raw.get("phase") or Phase.PENDING.value)
    except ValueError:
        phase = Phase.PENDING
    epoch = _count(raw.get("placementEpoch"))
    if epoch is None:
        epoch = record_epoch if record_epoch is not None else 0
    conditions = raw.get("conditions")
    elastic = raw.get("elastic")
    return JobStatus(
        raw=raw,
        phase=phase,
        restarts=_count(raw.get("restarts")) or 0,
        drops=(_count(elastic.get("drops")) if isinstance(elastic, Mapping) else None) or 0,
        placement_epoch=epoch,
        queued_at=str(raw.get("queuedAt") or ""),
        start_time=str(raw.get("startTime") or ""),
        conditions=tuple(c for c in conditions if isinstance(c, Mapping)) if isinstance(conditions, list) else (),
        succeeded_pods=_incarnations(raw.get("succeededPods")),
    )


def _incarnations(value: object) -> dict[str, int]:
    """``status.succeededPods``; an entry that is not name -> count is dropped (it is only ever ours)."""
    if not isinstance(value, Mapping):
        return {}
    counts = {str(name): _count(n) for name, n in value.items()}
    return {name: n for name, n in counts.items() if n is not None}

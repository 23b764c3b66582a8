"""Events, their deterministic order, and the simulated clock.

The queue is a heap of ``(time, kind rank, sequence number)``. Two events at the same instant run in the
order of :class:`Kind` (finishes free GPUs before repairs, failures and arrivals are seen, and the
scheduler runs after all of them), and two events of the same kind in the order they were pushed. Nothing
depends on dict or set iteration, so the same inputs give the same run, event for event.
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass, field


class Kind(enum.IntEnum):
    """Kinds of simulator events; the value is the tie-break rank at equal times (lower runs first)."""

    FINISH = 0  # a job's work is done: free its GPUs first so everything after sees them
    REPAIR = 1  # hardware comes back
    FAILURE = 2  # node, GPU or software failure
    PREEMPT = 3  # the queue policy asked for a running job to make room (also: a migration back, at a checkpoint)
    ARRIVAL = 4  # a job is submitted
    START = 5  # a placed job begins running (after the start-up latency)
    SCHEDULE = 6  # one pass of the queue policy over the waiting jobs
    SAMPLE = 7  # record allocation and fragmentation for the time series
    END = 8  # the horizon (--days) is reached


@dataclass(frozen=True, slots=True)
class SimEvent:
    """One event on the simulated clock (not a lifecycle event: those are ``core.lifecycle.Event``)."""

    time: float
    kind: Kind
    seq: int
    job_id: str = ""
    payload: tuple[object, ...] = field(default=())


class SimClock:
    """The injected clock: only the engine advances it, and never backwards."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, to: float) -> None:
        if to < self._now:
            raise ValueError(f"time must not run backwards: {to} < {self._now}")
        self._now = to


class EventQueue:
    """A min-heap of events with a total, deterministic order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, SimEvent]] = []
        self._seq = 0

    def push(self, time: float, kind: Kind, job_id: str = "", payload: tuple[object, ...] = ()) -> SimEvent:
        event = SimEvent(time, kind, self._seq, job_id, payload)
        self._seq += 1
        heapq.heappush(self._heap, (time, int(kind), event.seq, event))
        return event

    def pop(self) -> SimEvent:
        return heapq.heappop(self._heap)[3]

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

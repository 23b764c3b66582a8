"""How long a job waits before it is placed again, as a value the pass takes in and hands back.

Two things make a job wait: its gang was refused part-way (a bind or create the API would not take; the pass
rolls the gang back) and it waits longer each time in a row, up to a minute, so a gang the cluster keeps
refusing does not churn pods every pass; or a write hit transient API trouble, and it waits half a second.
A job whose gang bound starts again from the shortest wait. Nothing here is persisted: a restarted operator
forgets the waits, which only makes it try sooner.

The runtime reports what happened (``Observed.bind_failures``, ``Observed.api_trouble``); the pass decides
the waits here, marks the held jobs ``BackingOff``, returns the new :class:`Backoff` in its plan and asks to
be woken when the first wait ends.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

ROLLBACK_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # seconds, by refusals in a row
API_TROUBLE_PAUSE = 0.5


@dataclass(frozen=True, slots=True)
class Hold:
    until: float  # epoch seconds
    why: str


@dataclass(frozen=True, slots=True)
class Backoff:
    holds: Mapping[str, Hold] = field(default_factory=dict)  # job key -> not before
    refusals: Mapping[str, int] = field(default_factory=dict)  # job key -> gangs refused in a row

    def after(self, refused: Mapping[str, str], troubled: Mapping[str, str], now: float) -> Backoff:
        """The waits once the runtime's reports since the last pass are taken in."""
        if not refused and not troubled:
            return self
        holds, refusals = dict(self.holds), dict(self.refusals)
        for key, why in refused.items():
            count = refusals.get(key, 0)
            refusals[key] = count + 1
            pause = ROLLBACK_BACKOFF[min(count, len(ROLLBACK_BACKOFF) - 1)]
            holds[key] = Hold(now + pause, f"retrying in {pause:g} s after: {why}")
        for key, why in troubled.items():
            if key not in refused:
                holds[key] = Hold(now + API_TROUBLE_PAUSE, f"retrying after: {why}")
        return Backoff(holds, refusals)

    def active(self, now: float) -> dict[str, str]:
        """Job key -> why it must not be placed at ``now``."""
        return {key: hold.why for key, hold in self.holds.items() if hold.until > now}

    def settle(self, now: float, jobs: Collection[str], bound: Collection[str]) -> Backoff:
        """What the next pass starts from: ended waits dropped, deleted jobs forgotten, and the count of a
        job whose gang bound started over."""
        holds = {key: hold for key, hold in self.holds.items() if hold.until > now and key in jobs}
        refusals = {key: n for key, n in self.refusals.items() if key in jobs and key not in bound}
        if len(holds) == len(self.holds) and len(refusals) == len(self.refusals):
            return self
        return Backoff(holds, refusals)

    def next_end(self) -> float | None:
        """When the first wait ends (epoch seconds): the pass should run again then."""
        return min((hold.until for hold in self.holds.values()), default=None)

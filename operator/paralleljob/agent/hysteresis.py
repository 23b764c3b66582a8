"""Hysteresis per GPU (pure): go down at once, come back only after a run of healthy polls *and* a hold time.

Going down fast matters because every second on a broken GPU is lost training; coming back slowly matters
because a GPU that flaps (an XID, a clean poll, another XID) would otherwise make the operator migrate a gang
back and forth. So a worse observation applies immediately; a better one must be seen ``recover_polls``
times in a row, and at least ``hold_seconds`` after the last bad observation, before the state steps down
to it. Both knobs are needed: polls alone would clear an XID-only fault (no live signal keeps it visible)
one interval later, and a hold time alone would clear a GPU between two failing polls.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paralleljob.agent.classify import SEVERITY, Finding, Observation
from paralleljob.core.cluster import GPUHealth


@dataclass(frozen=True, slots=True)
class Hysteresis:
    recover_polls: int = 3
    hold_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class GpuTrack:
    """A GPU's reported state and why; ``findings`` are those of the observation that set the state."""

    state: GPUHealth = GPUHealth.HEALTHY
    findings: tuple[Finding, ...] = ()
    since: float = 0.0  # when the state was entered (monotonic seconds)
    last_bad: float | None = None  # last poll that saw this state or worse
    good_streak: int = 0  # consecutive polls better than ``state``

    @property
    def reason(self) -> str:
        return self.findings[0].reason if self.findings else ""

    @property
    def message(self) -> str:
        return "; ".join(f.message for f in self.findings)


def advance(track: GpuTrack, observation: Observation, now: float, policy: Hysteresis) -> GpuTrack:
    seen, current = SEVERITY[observation.state], SEVERITY[track.state]
    if seen > current:
        return GpuTrack(observation.state, observation.findings, since=now, last_bad=now)
    if seen == current:
        if observation.state is GPUHealth.HEALTHY:
            return track
        # Same state again: the hold time restarts. The explanation keeps what set the state (an XID is seen
        # once, its symptoms on every poll) and takes the newest reading for each reason seen again.
        return replace(track, findings=merge(observation.findings, track.findings), last_bad=now, good_streak=0)
    streak = track.good_streak + 1
    held = track.last_bad is None or now - track.last_bad >= policy.hold_seconds
    if streak >= policy.recover_polls and held:
        last_bad = None if observation.state is GPUHealth.HEALTHY else now
        return GpuTrack(observation.state, observation.findings, since=now, last_bad=last_bad)
    return replace(track, good_streak=streak)


def merge(new: tuple[Finding, ...], old: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """The new findings, then old reasons of the same state not seen again; XIDs (the causes) first."""
    seen = {f.reason for f in new}
    states = {f.state for f in new}
    merged = [*new, *(f for f in old if f.reason not in seen and f.state in states)]
    merged.sort(key=lambda f: not f.reason.startswith("XID"))
    return tuple(merged)

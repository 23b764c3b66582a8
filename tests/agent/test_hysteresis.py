"""Down at once; back only after ``recover_polls`` clean polls *and* ``hold_seconds`` since the last fault."""

from __future__ import annotations

from paralleljob.agent.classify import Finding, Observation
from paralleljob.agent.hysteresis import GpuTrack, Hysteresis, advance
from paralleljob.core.cluster import GPUHealth

POLICY = Hysteresis(recover_polls=3, hold_seconds=10.0)
OK = Observation(0, GPUHealth.HEALTHY, ())
HOT = Observation(0, GPUHealth.DEGRADED, (Finding(GPUHealth.DEGRADED, "Thermal", "hot"),))
LOST = Observation(0, GPUHealth.OFFLINE, (Finding(GPUHealth.OFFLINE, "XID79", "fell off the bus"),))


def run(observations: list[tuple[float, Observation]], track: GpuTrack | None = None) -> list[GPUHealth]:
    track = track or GpuTrack()
    states = []
    for now, observation in observations:
        track = advance(track, observation, now, POLICY)
        states.append(track.state)
    return states


def test_a_fault_applies_at_once() -> None:
    assert run([(0, OK), (1, LOST)]) == [GPUHealth.HEALTHY, GPUHealth.OFFLINE]


def test_recovery_needs_both_the_polls_and_the_hold_time() -> None:
    # Three clean polls within the hold time are not enough...
    assert run([(0, LOST), (1, OK), (2, OK), (3, OK)])[-1] is GPUHealth.OFFLINE
    # ...nor is the hold time with too few polls...
    assert run([(0, LOST), (20, OK), (21, OK)])[-1] is GPUHealth.OFFLINE
    # ...both are.
    assert run([(0, LOST), (8, OK), (9, OK), (10, OK)])[-1] is GPUHealth.HEALTHY


def test_a_fault_during_recovery_restarts_the_count_and_the_hold() -> None:
    states = run([(0, LOST), (5, OK), (6, OK), (7, LOST), (12, OK), (13, OK), (14, OK), (17, OK)])
    assert states[:7] == [GPUHealth.OFFLINE] * 7, "the second fault at t=7 holds until t=17"
    assert states[-1] is GPUHealth.HEALTHY


def test_recovery_steps_down_to_what_is_seen_not_straight_to_healthy() -> None:
    states = run([(0, LOST), (10, HOT), (11, HOT), (12, HOT)])
    assert states == [GPUHealth.OFFLINE, GPUHealth.OFFLINE, GPUHealth.OFFLINE, GPUHealth.DEGRADED]


def test_the_track_remembers_why() -> None:
    track = advance(GpuTrack(), LOST, 0.0, POLICY)
    assert track.reason == "XID79" and track.message == "fell off the bus" and track.since == 0.0
    assert advance(track, OK, 1.0, POLICY).reason == "XID79"  # still down: still explained


def test_the_cause_stays_in_the_explanation_while_the_symptom_persists() -> None:
    lost = Observation(0, GPUHealth.OFFLINE, (Finding(GPUHealth.OFFLINE, "GPULost", "unreachable"),))
    track = advance(GpuTrack(), LOST, 0.0, POLICY)  # XID 79 and, from then on, only the symptom
    for now in (1.0, 2.0):
        track = advance(track, lost, now, POLICY)
    assert [f.reason for f in track.findings] == ["XID79", "GPULost"] and track.reason == "XID79"
    assert track.last_bad == 2.0

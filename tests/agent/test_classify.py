"""Live signals of one sample: ECC thresholds, row remapping, page retirement, thermal, NVLink, lost GPUs."""

from __future__ import annotations

import pytest

from paralleljob.agent.classify import Thresholds, observe_gpu, observe_node
from paralleljob.agent.model import GpuSample, NodeSample, XidEvent
from paralleljob.core.cluster import GPUHealth

T = Thresholds()


def state(**fields: object) -> GPUHealth:
    return observe_gpu(GpuSample(index=0, **fields), [], T).state  # type: ignore[arg-type]


def test_a_clean_sample_is_healthy_and_unsupported_readings_are_not_faults() -> None:
    assert state(temperature_c=60.0, ecc_uncorrected_volatile=0, ecc_corrected_volatile=12) is GPUHealth.HEALTHY
    # None everywhere: a consumer card without ECC, remapping or NVLink.
    assert state() is GPUHealth.HEALTHY


@pytest.mark.parametrize(
    ("fields", "expected", "reason"),
    [
        ({"ecc_uncorrected_volatile": 1}, GPUHealth.RESETTING, "EccUncorrected"),
        ({"ecc_corrected_volatile": 9_999}, GPUHealth.HEALTHY, None),
        ({"ecc_corrected_volatile": 10_000}, GPUHealth.DEGRADED, "EccCorrectedStorm"),
        ({"ecc_uncorrected_aggregate": 50}, GPUHealth.HEALTHY, None),  # lifetime history alone is no fault
        ({"retired_pages": 59}, GPUHealth.HEALTHY, None),
        ({"retired_pages": 60}, GPUHealth.OFFLINE, "RetiredPages"),
        ({"retired_pages_pending": True}, GPUHealth.RESETTING, "PageRetirementPending"),
        ({"remap_pending": True}, GPUHealth.RESETTING, "RowRemapPending"),
        ({"remap_failed": True}, GPUHealth.OFFLINE, "RowRemapFailed"),
        ({"remap_pending": False, "remap_failed": False}, GPUHealth.HEALTHY, None),
        ({"temperature_c": 84.9}, GPUHealth.HEALTHY, None),
        ({"temperature_c": 85.0}, GPUHealth.DEGRADED, "Thermal"),
        ({"lost": True, "error": "GPU is lost"}, GPUHealth.OFFLINE, "GPULost"),
    ],
)
def test_thresholds(fields: dict[str, object], expected: GPUHealth, reason: str | None) -> None:
    observation = observe_gpu(GpuSample(index=0, **fields), [], T)  # type: ignore[arg-type]
    assert observation.state is expected
    assert (observation.findings[0].reason if observation.findings else None) == reason


def test_thresholds_are_configurable() -> None:
    assert observe_gpu(GpuSample(index=0, temperature_c=80.0), [], Thresholds(thermal_c=75)).state is GPUHealth.DEGRADED


def test_worst_finding_wins_and_the_xid_names_the_cause() -> None:
    sample = GpuSample(index=3, lost=True, temperature_c=99.0)
    observation = observe_gpu(sample, [XidEvent(3, 79), XidEvent(3, 31)], T)
    assert observation.state is GPUHealth.OFFLINE
    assert [f.reason for f in observation.findings] == ["XID79", "GPULost"]
    hot_and_remap = observe_gpu(GpuSample(index=1, temperature_c=95.0, remap_pending=True), [], T)
    assert hot_and_remap.state is GPUHealth.RESETTING
    assert [f.reason for f in hot_and_remap.findings] == ["RowRemapPending", "Thermal"]


def test_nvlink_down_is_judged_against_the_most_links_seen() -> None:
    assert observe_gpu(GpuSample(index=0, nvlinks_active=18), [], T, baseline_links=18).state is GPUHealth.HEALTHY
    down = observe_gpu(GpuSample(index=0, nvlinks_active=16), [], T, baseline_links=18)
    assert down.state is GPUHealth.DEGRADED and "2 of 18" in down.findings[0].message


def test_node_observation_marks_missing_and_unreachable_gpus_offline() -> None:
    sample = NodeSample((GpuSample(index=0), GpuSample(index=1)))
    out = observe_node(sample, [XidEvent(1, 48)], T, known=[0, 1, 2])
    assert out[0].state is GPUHealth.HEALTHY
    assert out[1].state is GPUHealth.RESETTING
    assert out[2].state is GPUHealth.OFFLINE and "disappeared" in out[2].findings[0].message
    broken = observe_node(NodeSample((), error="nvmlDeviceGetCount: Unknown Error"), [], T, known=[0, 1])
    assert {o.state for o in broken.values()} == {GPUHealth.OFFLINE}
    assert "Unknown Error" in broken[0].findings[0].message

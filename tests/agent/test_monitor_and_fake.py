"""The monitor's memory across polls (UUID identity, NVLink baseline) and the scripted fake NVML."""

from __future__ import annotations

from pathlib import Path

import pytest

from paralleljob.agent.fake import FakeNvml, ScriptError, load_script, parse_script
from paralleljob.agent.hysteresis import Hysteresis
from paralleljob.agent.model import GpuSample, NodeSample, XidEvent
from paralleljob.agent.monitor import Monitor
from paralleljob.core.cluster import GPUHealth
from tests.agent.fakes import fake_nvml


def test_gpus_keep_their_first_index_when_nvml_renumbers_them() -> None:
    monitor = Monitor(hysteresis=Hysteresis(recover_polls=1, hold_seconds=0))
    monitor.step(NodeSample(tuple(GpuSample(index=i, uuid=f"u{i}") for i in range(4))), [], 0.0)
    # GPU u1 fell off the bus and NVML now enumerates three devices: u2, u3 moved down to 1, 2.
    shifted = NodeSample((GpuSample(index=0, uuid="u0"), GpuSample(index=1, uuid="u2"), GpuSample(index=2, uuid="u3")))
    result = monitor.step(shifted, [XidEvent(1, 48)], 1.0)  # the XID names NVML's *current* index 1: u2
    assert result.tracks[1].state is GPUHealth.OFFLINE and result.tracks[1].reason == "GPULost"
    assert result.tracks[2].state is GPUHealth.RESETTING and result.tracks[2].reason == "XID48"
    assert result.tracks[3].state is GPUHealth.HEALTHY
    assert [t.gpu for t in result.transitions] == [1, 2]


def test_nvlink_baseline_is_learned() -> None:
    monitor = Monitor()
    ok = monitor.step(NodeSample((GpuSample(index=0, nvlinks_active=18, nvlinks_total=18),)), [], 0.0)
    assert ok.tracks[0].state is GPUHealth.HEALTHY
    down = monitor.step(NodeSample((GpuSample(index=0, nvlinks_active=17, nvlinks_total=18),)), [], 1.0)
    assert down.tracks[0].state is GPUHealth.DEGRADED and down.tracks[0].reason == "NVLinkDown"


def test_fake_replays_xids_and_readings_poll_by_poll() -> None:
    nvml = fake_nvml(
        [
            {"poll": 1, "gpu": 3, "xid": 79, "set": {"lost": True}},
            {"poll": 1, "gpu": 0, "xid": 31},
            {"poll": 3, "gpu": 3, "set": {"lost": False, "temperature_c": 90.5}},
        ],
        temperature_c=41,
    )
    assert nvml.wait_xids(1.0) == [] and not nvml.sample().gpus[3].lost
    assert nvml.wait_xids(1.0) == [XidEvent(3, 79), XidEvent(0, 31)]
    assert nvml.sample().gpus[3].lost
    assert nvml.wait_xids(1.0) == [] and nvml.sample().gpus[3].lost, "set values persist"
    nvml.wait_xids(1.0)
    gpu = nvml.sample().gpus[3]
    assert not gpu.lost and gpu.temperature_c == 90.5 and nvml.sample().gpus[1].temperature_c == 41


def test_fake_sleeps_like_the_real_event_wait_only_when_nothing_happens() -> None:
    slept: list[float] = []
    nvml = FakeNvml(parse_script({"gpus": 1, "steps": [{"poll": 0, "gpu": 0, "xid": 48}]}), sleep=slept.append)
    assert nvml.wait_xids(0.5) == [XidEvent(0, 48)] and slept == []
    nvml.sample()
    assert nvml.wait_xids(0.5) == [] and slept == [0.5]


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ([], "expected a mapping"),
        ({"gpus": 0}, "gpus: expected an integer >= 1"),
        ({"gpus": 2, "extra": 1}, "unknown keys ['extra']"),
        ({"gpus": 2, "defaults": {"temprature_c": 40}}, "defaults.temprature_c: unknown reading"),
        ({"gpus": 2, "defaults": {"lost": "yes"}}, "defaults.lost: expected bool"),
        ({"gpus": 2, "defaults": {"ecc_uncorrected_volatile": True}}, "expected int"),
        ({"gpus": 2, "steps": [{"poll": 0, "gpu": 2, "xid": 79}]}, "steps[0].gpu: 2 but the script has only 2 GPUs"),
        ({"gpus": 2, "steps": [{"poll": -1, "gpu": 0, "xid": 79}]}, "steps[0].poll: expected an integer >= 0"),
        ({"gpus": 2, "steps": [{"poll": 0, "gpu": 0}]}, "steps[0]: needs an xid or a set"),
        ({"gpus": 2, "steps": [{"poll": 0, "gpu": 0, "xid": 0}]}, "steps[0].xid: expected an integer >= 1"),
    ],
)
def test_bad_scripts_are_refused_with_the_entry_to_fix(script: object, message: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(script)
    assert message in str(info.value)


def test_scripts_load_from_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("gpus: 2\nsteps:\n  - {poll: 0, gpu: 1, xid: 48}\n")
    (tmp_path / "b.json").write_text('{"gpus": 2, "steps": [{"poll": 0, "gpu": 1, "xid": 48}]}')
    assert load_script(tmp_path / "a.yaml") == load_script(tmp_path / "b.json")
    with pytest.raises(ScriptError, match=r"missing\.yaml"):
        load_script(tmp_path / "missing.yaml")

"""The real NVML wrapper against a stand-in library: the pynvml module with its functions replaced, so the
calls, constants and error classes are the real package's and only the driver is simulated."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from paralleljob.agent.model import XidEvent
from paralleljob.agent.nvml import NvmlUnavailable
from paralleljob.agent.pynvml_source import PynvmlSource


def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class Driver:
    """Three GPUs: 0 a data-centre board, 1 lost mid-poll, 2 a consumer card (no ECC, remapping, NVLink)."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.registered: list[int] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def dc_only(handle: int, value: Any) -> Any:
            if handle == 2:
                raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return value

        def temperature(handle: int, sensor: int) -> int:
            assert sensor == pynvml.NVML_TEMPERATURE_GPU
            if handle == 1:
                raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
            return 61

        def ecc_errors(handle: int, kind: int, counter: int) -> int:
            return {(0, 0): 5, (1, 0): 0, (0, 1): 120, (1, 1): 2}[(kind, counter)]

        def retired(handle: int, cause: int) -> list[int]:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)  # Ampere+: row remapping instead

        def nvlink(handle: int, link: int) -> int:
            if handle == 2 or link >= 18:
                raise err(pynvml.NVML_ERROR_NOT_SUPPORTED if handle == 2 else pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return pynvml.NVML_FEATURE_ENABLED if link != 7 else 0

        def wait(event_set: Any, timeout_ms: int) -> Any:
            if not self.events:
                raise err(pynvml.NVML_ERROR_TIMEOUT)
            return self.events.pop(0)

        replacements: dict[str, Any] = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: 3,
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetIndex": lambda handle: handle,
            "nvmlEventSetCreate": lambda: "event-set",
            "nvmlEventSetFree": lambda event_set: None,
            "nvmlDeviceGetSupportedEventTypes": lambda handle: pynvml.nvmlEventTypeXidCriticalError,
            "nvmlDeviceRegisterEvents": lambda handle, types, event_set: self.registered.append(handle),
            "nvmlSystemGetDriverVersion": lambda: "570.86.15",
            "nvmlSystemGetNVMLVersion": lambda: "12.570.86.15",
            "nvmlDeviceGetUUID": lambda handle: f"GPU-{handle}",
            "nvmlDeviceGetName": lambda handle: "NVIDIA H100 80GB HBM3",
            "nvmlDeviceGetUtilizationRates": lambda handle: SimpleNamespace(gpu=87, memory=40),
            "nvmlDeviceGetPowerUsage": lambda handle: 412_345,
            "nvmlDeviceGetEccMode": lambda handle: dc_only(handle, [1, 1]),
            "nvmlDeviceGetTotalEccErrors": ecc_errors,
            "nvmlDeviceGetRetiredPages": retired,
            "nvmlDeviceGetRetiredPagesPendingStatus": lambda handle: dc_only(handle, 0),
            "nvmlDeviceGetRemappedRows": lambda handle: dc_only(handle, (3, 1, 1, 0)),
            "nvmlDeviceGetNvLinkState": nvlink,
            "nvmlDeviceGetTemperature": temperature,
            "nvmlEventSetWait": wait,
        }
        for name, fn in replacements.items():
            assert hasattr(pynvml, name), f"pynvml has no {name}: the wrapper calls a name that does not exist"
            monkeypatch.setattr(pynvml, name, fn)


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> tuple[PynvmlSource, Driver]:
    driver = Driver()
    driver.install(monkeypatch)
    nvml = PynvmlSource()
    nvml.open()
    return nvml, driver


def test_sample_maps_every_reading(source: tuple[PynvmlSource, Driver]) -> None:
    nvml, driver = source
    assert driver.registered == [0, 1, 2]
    sample = nvml.sample()
    assert (sample.driver_version, sample.nvml_version) == ("570.86.15", "12.570.86.15")
    dc, lost, consumer = sample.gpus
    assert dc.uuid == "GPU-0" and dc.temperature_c == 61.0 and dc.power_w == pytest.approx(412.345)
    assert dc.utilization_pct == 87.0 and dc.memory_utilization_pct == 40.0 and dc.ecc_enabled is True
    assert (dc.ecc_corrected_volatile, dc.ecc_uncorrected_volatile) == (5, 0)
    assert (dc.ecc_corrected_aggregate, dc.ecc_uncorrected_aggregate) == (120, 2)
    assert dc.retired_pages is None and dc.retired_pages_pending is False
    assert (dc.remapped_rows_corrected, dc.remapped_rows_uncorrected, dc.remap_pending, dc.remap_failed) == (
        3,
        1,
        True,
        False,
    )
    assert (dc.nvlinks_active, dc.nvlinks_total) == (17, 18)
    assert lost.lost and "lost" in lost.error.lower()
    assert consumer.ecc_enabled is None and consumer.ecc_corrected_volatile is None
    assert consumer.remap_pending is None and consumer.nvlinks_total is None and not consumer.lost
    nvml.close()


def test_xid_events_are_read_and_drained(source: tuple[PynvmlSource, Driver]) -> None:
    nvml, driver = source
    assert nvml.wait_xids(0.01) == []
    xid = pynvml.nvmlEventTypeXidCriticalError
    driver.events = [
        SimpleNamespace(device=0, eventType=xid, eventData=79),
        SimpleNamespace(device=2, eventType=xid, eventData=31),
    ]
    assert nvml.wait_xids(1.0) == [XidEvent(0, 79), XidEvent(2, 31)]


def test_device_list_failure_is_a_node_wide_error(source: tuple[PynvmlSource, Driver], monkeypatch: Any) -> None:
    nvml, _ = source

    def broken() -> int:
        raise err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", broken)
    sample = nvml.sample()
    assert sample.gpus == () and "nvmlDeviceGetCount" in sample.error


def test_init_failure_is_nvml_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> None:
        raise err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        PynvmlSource().open()


def test_a_gpu_in_mig_mode_reports_its_mig_devices(source: tuple[PynvmlSource, Driver], monkeypatch: Any) -> None:
    nvml, _ = source

    def mig_mode(handle: Any) -> tuple[int, int]:
        if handle == 2:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a consumer card cannot do MIG
        return (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE) if handle == 0 else (0, 0)

    def mig_handle(handle: int, index: int) -> tuple[int, int]:
        if index in (1, 4):  # slots with no MIG device
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return (handle, index)

    def name(handle: Any) -> str:
        return "NVIDIA H100 80GB HBM3" + (" MIG 1g.10gb" if isinstance(handle, tuple) else "")

    def uuid(handle: Any) -> str:
        return f"MIG-{handle[0]}-{handle[1]}" if isinstance(handle, tuple) else f"GPU-{handle}"

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", mig_mode)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda handle: 7)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex", mig_handle)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", name)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", uuid)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceId", lambda handle: 7 + handle[1])
    sample = nvml.sample()
    sliced, lost, consumer = sample.gpus
    assert sliced.mig_enabled is True and sliced.mig_devices is not None
    assert [(d.index, d.uuid, d.profile, d.gpu_instance) for d in sliced.mig_devices] == [
        (i, f"MIG-0-{i}", "1g.10gb", 7 + i) for i in (0, 2, 3, 5, 6)
    ]
    assert sliced.to_json()["mig_devices"][0] == {
        "index": 0,
        "uuid": "MIG-0-0",
        "profile": "1g.10gb",
        "gpu_instance": 7,
    }
    assert lost.lost and consumer.mig_enabled is None and consumer.mig_devices is None
    assert "mig_enabled" not in consumer.to_json()

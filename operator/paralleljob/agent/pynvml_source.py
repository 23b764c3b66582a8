"""The real NVML behind :class:`~paralleljob.agent.nvml.NvmlSource`, through ``nvidia-ml-py`` (``import pynvml``).

A GPU in MIG mode also reports its MIG devices (their UUIDs, profiles read from their names, GPU instances):
what the device plugin hands pods as slices. Every query that a GPU or driver does not support yields
``None`` for that field, never an error: an NVML error on one counter must not take a healthy GPU out of
service. Only ``GPU_IS_LOST`` (or a handle that
cannot be had) marks a GPU lost. XIDs arrive through an NVML event set (``nvmlEventTypeXidCriticalError``);
``nvmlEventSetWait`` blocks in C with the GIL released, so the agent runs it in a worker thread.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from paralleljob.agent.model import GpuSample, MigDeviceSample, NodeSample, XidEvent
from paralleljob.agent.nvml import NvmlUnavailable

log = logging.getLogger("paralleljob.agent")
_PROFILE = re.compile(r"^[1-7]g\.[0-9]+gb$")  # a MIG device's name ends in its profile: "... MIG 1g.10gb"
T = TypeVar("T")


class _Lost(Exception):
    pass


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class PynvmlSource:
    def __init__(self) -> None:
        self.nvml: Any = None
        self.event_set: Any = None

    def open(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise NvmlUnavailable(
                "the nvidia-ml-py package is not installed (pip install 'paralleljob[agent]')"
            ) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(
                f"NVML could not be initialised ({exc}): this machine has no usable NVIDIA driver"
                " (libnvidia-ml.so.1 and /dev/nvidia*)"
            ) from None
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML cannot list the GPUs ({exc})") from None
        if count == 0:
            # Typical of a container started without the NVIDIA runtime: reporting "all 0 GPUs healthy"
            # would hide that the node's GPUs are not watched at all.
            raise NvmlUnavailable(
                "NVML sees no GPU (in a container: runtimeClassName nvidia and NVIDIA_VISIBLE_DEVICES=all)"
            )
        self.nvml = pynvml
        self._register_xids()

    def _register_xids(self) -> None:
        nvml = self.nvml
        try:
            self.event_set = nvml.nvmlEventSetCreate()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
                if supported & nvml.nvmlEventTypeXidCriticalError:
                    nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self.event_set)
                else:
                    log.warning("GPU %d does not report XID events; relying on polled signals only", index)
        except nvml.NVMLError as exc:
            # Polling still finds lost GPUs, ECC and remap state; only the instant XID signal is missing.
            log.warning("XID events unavailable (%s); relying on polled signals only", exc)

    def close(self) -> None:
        if self.nvml is None:
            return
        try:
            if self.event_set is not None:
                self.nvml.nvmlEventSetFree(self.event_set)
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            log.debug("NVML shutdown: %s", exc)
        self.nvml = self.event_set = None

    # ---- polling ------------------------------------------------------------------------------------
    def _try(self, call: Callable[..., T], *args: Any) -> T | None:
        try:
            return call(*args)
        except self.nvml.NVMLError as exc:
            if exc.value == self.nvml.NVML_ERROR_GPU_IS_LOST:
                raise _Lost(str(exc)) from None
            return None

    def sample(self) -> NodeSample:
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            return NodeSample((), error=f"nvmlDeviceGetCount: {exc}")
        driver = self._try(nvml.nvmlSystemGetDriverVersion) or ""
        version = self._try(nvml.nvmlSystemGetNVMLVersion) or ""
        gpus = []
        for index in range(count):
            try:
                gpus.append(self._sample_gpu(index))
            except _Lost as exc:
                gpus.append(GpuSample(index=index, lost=True, error=str(exc)))
        return NodeSample(tuple(gpus), _text(driver), _text(version))

    def _sample_gpu(self, index: int) -> GpuSample:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            return GpuSample(index=index, lost=True, error=f"nvmlDeviceGetHandleByIndex: {exc}")
        t = self._try
        util = t(nvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = t(nvml.nvmlDeviceGetPowerUsage, handle)
        ecc_mode = t(nvml.nvmlDeviceGetEccMode, handle)
        ecc_on = None if ecc_mode is None else ecc_mode[0] == nvml.NVML_FEATURE_ENABLED

        def ecc(kind: int, counter: int) -> int | None:
            value = t(nvml.nvmlDeviceGetTotalEccErrors, handle, kind, counter) if ecc_on else None
            return None if value is None else int(value)

        retired: int | None = None
        for cause in (
            nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        ):
            pages = t(nvml.nvmlDeviceGetRetiredPages, handle, cause)
            if pages is not None:
                retired = (retired or 0) + len(pages)
        pending = t(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        rows = t(nvml.nvmlDeviceGetRemappedRows, handle)  # (corrected, uncorrected, pending, failure)
        active, total = self._nvlinks(handle)
        temperature = t(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        mode = t(nvml.nvmlDeviceGetMigMode, handle)  # (current, pending)
        mig_on = None if mode is None else mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        return GpuSample(
            index=index,
            uuid=_text(t(nvml.nvmlDeviceGetUUID, handle) or ""),
            name=_text(t(nvml.nvmlDeviceGetName, handle) or ""),
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power_mw is None else power_mw / 1000.0,
            utilization_pct=None if util is None else float(util.gpu),
            memory_utilization_pct=None if util is None else float(util.memory),
            ecc_enabled=ecc_on,
            ecc_corrected_volatile=ecc(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC),
            ecc_uncorrected_volatile=ecc(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
            ecc_corrected_aggregate=ecc(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC),
            ecc_uncorrected_aggregate=ecc(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
            retired_pages=retired,
            retired_pages_pending=None if pending is None else pending == nvml.NVML_FEATURE_ENABLED,
            remapped_rows_corrected=None if rows is None else int(rows[0]),
            remapped_rows_uncorrected=None if rows is None else int(rows[1]),
            remap_pending=None if rows is None else bool(rows[2]),
            remap_failed=None if rows is None else bool(rows[3]),
            nvlinks_active=active if total else None,
            nvlinks_total=total or None,
            mig_enabled=mig_on,
            mig_devices=self._mig_devices(handle) if mig_on else None,
        )

    def _mig_devices(self, handle: Any) -> tuple[MigDeviceSample, ...]:
        """The MIG devices of a GPU in MIG mode: an index with no device answers NOT_FOUND and is skipped."""
        nvml, t = self.nvml, self._try
        out = []
        for i in range(t(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            mig = t(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            if mig is None:
                continue
            name = _text(t(nvml.nvmlDeviceGetName, mig) or "")
            profile = next((word for word in reversed(name.split()) if _PROFILE.match(word)), "")
            instance = t(nvml.nvmlDeviceGetGpuInstanceId, mig)
            uuid = _text(t(nvml.nvmlDeviceGetUUID, mig) or "")
            out.append(MigDeviceSample(i, uuid, profile, None if instance is None else int(instance)))
        return tuple(out)

    def _nvlinks(self, handle: Any) -> tuple[int, int]:
        """(active, existing) links: a link that does not exist answers NOT_SUPPORTED or INVALID_ARGUMENT."""
        nvml = self.nvml
        active = total = 0
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            state = self._try(nvml.nvmlDeviceGetNvLinkState, handle, link)
            if state is None:
                continue
            total += 1
            active += int(state == nvml.NVML_FEATURE_ENABLED)
        return active, total

    # ---- XID events -------------------------------------------------------------------------------
    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        nvml = self.nvml
        if self.event_set is None:
            time.sleep(timeout_s)
            return []
        events: list[XidEvent] = []
        wait_ms = max(0, int(timeout_s * 1000))
        while True:
            try:
                data = nvml.nvmlEventSetWait(self.event_set, wait_ms)
            except nvml.NVMLError as exc:
                if exc.value != nvml.NVML_ERROR_TIMEOUT:
                    log.warning("nvmlEventSetWait: %s", exc)
                    if not events:
                        time.sleep(timeout_s)  # never spin on a broken event set
                return events
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                try:
                    index = self._try(nvml.nvmlDeviceGetIndex, data.device)
                except _Lost:
                    index = None
                events.append(XidEvent(-1 if index is None else int(index), int(data.eventData)))
            wait_ms = 0  # drain whatever else is queued, without waiting again

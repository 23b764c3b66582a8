"""What the agent reads from NVML, as plain values: one :class:`GpuSample` per GPU, a :class:`NodeSample` per
poll, and :class:`XidEvent` for each XID the driver reported.

``None`` means "this GPU or driver does not report it" (no ECC on a consumer card, no row remapping before
Ampere, no NVLink on a PCIe board), which the classifier must never read as zero errors or as a fault.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class MigDeviceSample:
    """One MIG device NVML lists under a GPU in MIG mode: what the device plugin hands a pod as one slice."""

    index: int  # its index under the GPU (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str  # MIG-...
    profile: str = ""  # "1g.10gb", read from its name ("" when the name carries none)
    gpu_instance: int | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str = ""
    name: str = ""
    lost: bool = False  # NVML cannot talk to it (GPU is lost, handle or query fails): treat as gone
    error: str = ""  # why it is lost
    temperature_c: float | None = None
    power_w: float | None = None
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    ecc_enabled: bool | None = None
    ecc_corrected_volatile: int | None = None  # since the last driver load / GPU reset
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None  # lifetime of the board
    ecc_uncorrected_aggregate: int | None = None
    retired_pages: int | None = None  # pre-Ampere page retirement (single- plus double-bit causes)
    retired_pages_pending: bool | None = None  # retirement waits for the next reset
    remapped_rows_corrected: int | None = None  # Ampere+ row remapping
    remapped_rows_uncorrected: int | None = None
    remap_pending: bool | None = None  # a remap waits for the next reset
    remap_failed: bool | None = None  # no spare rows left: the board needs replacing
    nvlinks_active: int | None = None
    nvlinks_total: int | None = None  # links that exist on this GPU
    mig_enabled: bool | None = None  # MIG mode now (None: the GPU cannot do MIG, or NVML does not say)
    mig_devices: tuple[MigDeviceSample, ...] | None = None  # in MIG mode: its MIG devices

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


@dataclass(frozen=True, slots=True)
class NodeSample:
    gpus: tuple[GpuSample, ...]
    driver_version: str = ""
    nvml_version: str = ""
    error: str = ""  # a node-wide failure (device list unavailable): no GPU can be vouched for

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"driverVersion": self.driver_version, "nvmlVersion": self.nvml_version}
        if self.error:
            out["error"] = self.error
        out["gpus"] = [g.to_json() for g in self.gpus]
        return out


@dataclass(frozen=True, slots=True)
class XidEvent:
    gpu: int  # NVML index of the GPU that raised it; -1 when the device could not be matched
    code: int
    detail: dict[str, Any] = field(default_factory=dict, compare=False)

"""One poll's verdict per GPU (pure): the sample's live signals plus the XIDs seen since the last poll.

Every reason found is kept as a :class:`Finding`; the GPU's observed state is the worst of them. Live
signals are what keep a GPU down until it is really fixed: after an XID 48 the driver reports a pending row
remap (or page retirement) and a non-zero volatile uncorrected ECC count until the GPU is reset, and a GPU
that fell off the bus keeps failing every query. XIDs are instantaneous; :mod:`.hysteresis` holds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from paralleljob.agent.model import GpuSample, NodeSample, XidEvent
from paralleljob.agent.xid import classify_xid
from paralleljob.core.cluster import GPUHealth

SEVERITY: dict[GPUHealth, int] = {
    GPUHealth.HEALTHY: 0,
    GPUHealth.DEGRADED: 1,
    GPUHealth.RESETTING: 2,
    GPUHealth.OFFLINE: 3,
}


def worst(states: Iterable[GPUHealth]) -> GPUHealth:
    return max(states, key=SEVERITY.__getitem__, default=GPUHealth.HEALTHY)


@dataclass(frozen=True, slots=True)
class Thresholds:
    thermal_c: float = 85.0  # at or above: Degraded (the GPU throttles; a TP group runs at its slowest GPU)
    ecc_uncorrected_volatile: int = 1  # at or above: Resetting (memory to retire or remap on the next reset)
    ecc_corrected_volatile: int = 10_000  # at or above: Degraded (a storm of corrected errors, cf. XID 92)
    retired_pages_offline: int = 60  # at or above: Offline (pre-Ampere retirement budget is about 64 pages)


@dataclass(frozen=True, slots=True)
class Finding:
    state: GPUHealth
    reason: str  # short CamelCase word for the node condition: XID79, Thermal, EccUncorrected, ...
    message: str


@dataclass(frozen=True, slots=True)
class Observation:
    index: int
    state: GPUHealth
    findings: tuple[Finding, ...]


def xid_finding(event: XidEvent) -> Finding:
    rule = classify_xid(event.code)
    return Finding(rule.state, f"XID{event.code}", f"XID {event.code} ({rule.xid_class.value}): {rule.description}")


def _at_least(value: float | None, threshold: float) -> bool:
    return value is not None and value >= threshold


def sample_findings(sample: GpuSample, thresholds: Thresholds, baseline_links: int = 0) -> list[Finding]:
    """The live signals of one sample, unordered (:func:`observe_gpu` sorts them, worst first)."""
    if sample.lost:
        return [Finding(GPUHealth.OFFLINE, "GPULost", f"NVML cannot reach the GPU: {sample.error or 'lost'}")]
    out: list[Finding] = []
    if sample.remap_failed:
        out.append(Finding(GPUHealth.OFFLINE, "RowRemapFailed", "row remapping failed: no spare memory rows left"))
    if _at_least(sample.retired_pages, thresholds.retired_pages_offline):
        out.append(
            Finding(GPUHealth.OFFLINE, "RetiredPages", f"{sample.retired_pages} retired pages: replace the board")
        )
    if sample.remap_pending:
        out.append(Finding(GPUHealth.RESETTING, "RowRemapPending", "a row remap waits for a GPU reset"))
    if sample.retired_pages_pending:
        out.append(Finding(GPUHealth.RESETTING, "PageRetirementPending", "a page retirement waits for a GPU reset"))
    if _at_least(sample.ecc_uncorrected_volatile, thresholds.ecc_uncorrected_volatile):
        out.append(
            Finding(
                GPUHealth.RESETTING,
                "EccUncorrected",
                f"{sample.ecc_uncorrected_volatile} uncorrected ECC errors since the last reset",
            )
        )
    if _at_least(sample.ecc_corrected_volatile, thresholds.ecc_corrected_volatile):
        out.append(
            Finding(
                GPUHealth.DEGRADED,
                "EccCorrectedStorm",
                f"{sample.ecc_corrected_volatile} corrected ECC errors since the last reset"
                f" (threshold {thresholds.ecc_corrected_volatile})",
            )
        )
    if _at_least(sample.temperature_c, thresholds.thermal_c):
        out.append(
            Finding(
                GPUHealth.DEGRADED,
                "Thermal",
                f"temperature {sample.temperature_c:g} C at or above {thresholds.thermal_c:g} C",
            )
        )
    if sample.nvlinks_active is not None and sample.nvlinks_active < baseline_links:
        out.append(
            Finding(
                GPUHealth.DEGRADED,
                "NVLinkDown",
                f"{baseline_links - sample.nvlinks_active} of {baseline_links} NVLinks inactive",
            )
        )
    return out


def observe_gpu(
    sample: GpuSample, xids: Sequence[XidEvent], thresholds: Thresholds, baseline_links: int = 0
) -> Observation:
    findings = sample_findings(sample, thresholds, baseline_links)
    # Application XIDs and unknown ones are counted in the metrics but are not findings: no action.
    for event in xids:
        finding = xid_finding(event)
        if finding.state is not GPUHealth.HEALTHY:
            findings.append(finding)
    # Worst first; at equal severity the XID leads, as it names the cause ("GPU lost" is its symptom).
    findings.sort(key=lambda f: (-SEVERITY[f.state], not f.reason.startswith("XID")))
    return Observation(sample.index, worst(f.state for f in findings), tuple(findings))


def observe_node(
    sample: NodeSample,
    xids: Sequence[XidEvent],
    thresholds: Thresholds,
    baseline_links: Mapping[int, int] | None = None,
    known: Iterable[int] = (),
) -> dict[int, Observation]:
    """Observations for every GPU sampled now or ever seen before (``known``): a GPU missing from the
    sample, or every GPU when NVML fails node-wide, is Offline."""
    by_gpu: dict[int, list[XidEvent]] = {}
    for event in xids:
        by_gpu.setdefault(event.gpu, []).append(event)
    out: dict[int, Observation] = {}
    for gpu in sample.gpus:
        links = (baseline_links or {}).get(gpu.index, 0)
        out[gpu.index] = observe_gpu(gpu, by_gpu.get(gpu.index, []), thresholds, links)
    why = sample.error or "the GPU disappeared from NVML's device list"
    for index in known:
        if index not in out:
            missing = GpuSample(index=index, lost=True, error=why)
            out[index] = observe_gpu(missing, by_gpu.get(index, []), thresholds)
    return out

"""XID classification: which driver-reported XID means what for the scheduler (pure, table-driven).

An XID is the NVIDIA driver's error code for one GPU. Many are the application's fault (a bad pointer, a
killed process) and say nothing about the hardware; moving a gang off a good GPU for those would turn one
crashed worker into a needless migration. The hardware ones map onto the core's GPU states:

- ``RESETTING`` — the GPU needs a reset before it can be trusted (pending row remap / page retirement,
  NVLink or GSP firmware fault); the operator moves the work away now.
- ``OFFLINE`` — the GPU is gone or its memory can no longer be repaired in the field.
- ``DEGRADED`` — works, but should get no new work (a storm of corrected errors).
- ``HEALTHY`` — no hardware action (application-level, or an XID this table does not know: logged and
  counted, never acted on, so a new driver's codes cannot evict jobs by surprise).

The reasoning per code is in ``docs/agent.md``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from paralleljob.core.cluster import GPUHealth


class XidClass(enum.Enum):
    MEMORY = "memory"
    BUS = "bus"
    NVLINK = "nvlink"
    FIRMWARE = "firmware"
    APPLICATION = "application"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class XidRule:
    code: int
    xid_class: XidClass
    state: GPUHealth
    description: str


def _rules(*rules: tuple[int, XidClass, GPUHealth, str]) -> dict[int, XidRule]:
    return {code: XidRule(code, cls, state, text) for code, cls, state, text in rules}


HEALTHY, DEGRADED, RESETTING, OFFLINE = GPUHealth.HEALTHY, GPUHealth.DEGRADED, GPUHealth.RESETTING, GPUHealth.OFFLINE
MEMORY, BUS, NVLINK, FIRMWARE = XidClass.MEMORY, XidClass.BUS, XidClass.NVLINK, XidClass.FIRMWARE
APP = XidClass.APPLICATION

XID_RULES: dict[int, XidRule] = _rules(
    (13, APP, HEALTHY, "graphics engine exception (usually the application)"),
    (31, APP, HEALTHY, "GPU memory page fault (an illegal address in the application)"),
    (43, APP, HEALTHY, "GPU stopped processing (the application faulted)"),
    (45, APP, HEALTHY, "preemptive cleanup (the application was terminated)"),
    (48, MEMORY, RESETTING, "double-bit ECC error: the bad memory is retired on the next reset"),
    (61, FIRMWARE, RESETTING, "internal micro-controller breakpoint/warning"),
    (62, FIRMWARE, RESETTING, "internal micro-controller halt"),
    (63, MEMORY, RESETTING, "ECC page retirement or row remapping recorded: applied on the next reset"),
    (64, MEMORY, OFFLINE, "ECC page retirement or row remapping failed: no spare memory left"),
    (74, NVLINK, RESETTING, "NVLink error"),
    (79, BUS, OFFLINE, "GPU has fallen off the bus"),
    (92, MEMORY, DEGRADED, "high single-bit ECC error rate"),
    (94, MEMORY, RESETTING, "contained ECC error: the application was stopped, the row awaits a reset"),
    (95, MEMORY, RESETTING, "uncontained ECC error: every process on the GPU is affected"),
    (119, FIRMWARE, RESETTING, "GSP firmware RPC timeout"),
    (120, FIRMWARE, RESETTING, "GSP firmware error"),
)


def classify_xid(code: int) -> XidRule:
    """The rule for ``code``; codes not in the table are counted but trigger no action."""
    rule = XID_RULES.get(code)
    if rule is not None:
        return rule
    return XidRule(code, XidClass.UNKNOWN, GPUHealth.HEALTHY, "not in the agent's table: logged, no action")

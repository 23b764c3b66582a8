"""The XID table: every class lands in the state the docs promise, unknown codes trigger nothing."""

from __future__ import annotations

import pytest

from paralleljob.agent.classify import Thresholds, observe_gpu
from paralleljob.agent.model import GpuSample, XidEvent
from paralleljob.agent.xid import XID_RULES, XidClass, classify_xid
from paralleljob.core.cluster import GPUHealth

EXPECTED = {
    48: (XidClass.MEMORY, GPUHealth.RESETTING),
    63: (XidClass.MEMORY, GPUHealth.RESETTING),
    64: (XidClass.MEMORY, GPUHealth.OFFLINE),
    92: (XidClass.MEMORY, GPUHealth.DEGRADED),
    94: (XidClass.MEMORY, GPUHealth.RESETTING),
    95: (XidClass.MEMORY, GPUHealth.RESETTING),
    79: (XidClass.BUS, GPUHealth.OFFLINE),
    74: (XidClass.NVLINK, GPUHealth.RESETTING),
    119: (XidClass.FIRMWARE, GPUHealth.RESETTING),
    120: (XidClass.FIRMWARE, GPUHealth.RESETTING),
    13: (XidClass.APPLICATION, GPUHealth.HEALTHY),
    31: (XidClass.APPLICATION, GPUHealth.HEALTHY),
    43: (XidClass.APPLICATION, GPUHealth.HEALTHY),
    45: (XidClass.APPLICATION, GPUHealth.HEALTHY),
}


@pytest.mark.parametrize(("code", "expected"), sorted(EXPECTED.items()))
def test_xid_class_and_state(code: int, expected: tuple[XidClass, GPUHealth]) -> None:
    rule = classify_xid(code)
    assert (rule.xid_class, rule.state) == expected
    observation = observe_gpu(GpuSample(index=2), [XidEvent(2, code)], Thresholds())
    assert observation.state is expected[1]
    if expected[1] is GPUHealth.HEALTHY:
        assert observation.findings == (), "application XIDs are no finding: no hardware action"
    else:
        assert observation.findings[0].reason == f"XID{code}"


@pytest.mark.parametrize("code", [1, 8, 69, 150, 999])
def test_unknown_xids_are_counted_but_never_acted_on(code: int) -> None:
    rule = classify_xid(code)
    assert rule.xid_class is XidClass.UNKNOWN and rule.state is GPUHealth.HEALTHY
    assert observe_gpu(GpuSample(index=0), [XidEvent(0, code)], Thresholds()).state is GPUHealth.HEALTHY


def test_every_rule_is_consistent() -> None:
    for code, rule in XID_RULES.items():
        assert rule.code == code and rule.description
        assert (rule.state is GPUHealth.HEALTHY) == (rule.xid_class is XidClass.APPLICATION)

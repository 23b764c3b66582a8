"""DeviceTaintRules (``resource.k8s.io/v1beta2`` in Kubernetes 1.36), parsed at the edge into frozen values,
and laid over the GPUs of DRA pools (``dra.node_gpus``) as if their driver had put the taint in the ResourceSlice.
This module is the leaf: ``dra`` imports it, never the other way round.

A DeviceTaintRule is how an admin or a health service (our agent, ``paralleljob.agent.taintrules``) taints
devices it does not publish. Its ``spec.deviceSelector`` has three optional fields, all of which must match:
``driver``, ``pool`` and ``device`` (the device's name in its pool). There is no CEL and no attribute
match in 1.36, so a rule meant for one GPU by UUID names that GPU's driver, pool and device; the agent looks
the UUID up in the slice. An empty selector matches every device of every driver; a rule *without* a
selector matches none (the API's own rule).

Effects mean here exactly what they mean in a slice (``dra.overlay_node``): ``NoExecute`` makes the GPU
unhealthy (its job is repaired by its failure policy), ``NoSchedule`` and ``None`` make it Degraded (it
keeps its job and gets no new one). An effect this version does not know is read as ``None``, as the API
asks consumers to, with a warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# GA in 1.37 (resource.k8s.io/v1); v1beta2 behind DRADeviceTaintRules in 1.36. Newest first: the one read
# when a server serves both.
TAINT_RULES_VERSIONS = ("v1", "v1beta2")
TAINT_RULES_RESOURCE = "devicetaintrules"
TAINT_RULES_API = "/apis/resource.k8s.io/v1beta2"
TAINT_RULES_PATH = f"{TAINT_RULES_API}/{TAINT_RULES_RESOURCE}"


def taint_rules_path(version: str) -> str:
    return f"/apis/resource.k8s.io/{version}/{TAINT_RULES_RESOURCE}"


def serves_taint_rules(resource_list: Mapping[str, Any]) -> bool:
    """Whether an API version's discovery document (``GET /apis/resource.k8s.io/<version>``) lists them."""
    return any(
        isinstance(r, Mapping) and r.get("name") == TAINT_RULES_RESOURCE for r in resource_list.get("resources") or []
    )


TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint on one device, from its slice or from a DeviceTaintRule."""

    key: str
    value: str
    effect: str  # NoSchedule | NoExecute | None


@dataclass(frozen=True, slots=True)
class DeviceSelector:
    """Empty fields match anything; ``matches_nothing`` for a rule without a selector."""

    driver: str = ""
    pool: str = ""
    device: str = ""
    matches_nothing: bool = False

    def matches(self, driver: str, pool: str, device: str) -> bool:
        if self.matches_nothing:
            return False
        return (
            (not self.driver or self.driver == driver)
            and (not self.pool or self.pool == pool)
            and (not self.device or self.device == device)
        )


@dataclass(frozen=True, slots=True)
class TaintRuleInfo:
    name: str
    selector: DeviceSelector
    taint: DeviceTaint
    warnings: tuple[str, ...] = ()


def parse_taint_rule(body: Mapping[str, Any]) -> TaintRuleInfo:
    metadata = body.get("metadata") or {}
    name = str(metadata.get("name") or "")
    spec = body.get("spec") or {}
    raw_selector = spec.get("deviceSelector")
    if isinstance(raw_selector, Mapping):
        selector = DeviceSelector(
            driver=str(raw_selector.get("driver") or ""),
            pool=str(raw_selector.get("pool") or ""),
            device=str(raw_selector.get("device") or ""),
        )
    else:
        selector = DeviceSelector(matches_nothing=True)
    raw_taint = spec.get("taint") or {}
    if not isinstance(raw_taint, Mapping):
        raw_taint = {}
    warnings = []
    effect = str(raw_taint.get("effect") or "")
    if effect not in TAINT_EFFECTS:
        warnings.append(f"DeviceTaintRule {name}: unknown effect {effect!r} read as None (Degraded)")
        effect = "None"
    taint = DeviceTaint(str(raw_taint.get("key") or ""), str(raw_taint.get("value") or ""), effect)
    return TaintRuleInfo(name, selector, taint, tuple(warnings))


def taints_for(rules: Iterable[TaintRuleInfo], driver: str, pool: str, device: str) -> tuple[DeviceTaint, ...]:
    """The taints the rules put on one device (in the rules' order)."""
    return tuple(r.taint for r in rules if r.selector.matches(driver, pool, device))

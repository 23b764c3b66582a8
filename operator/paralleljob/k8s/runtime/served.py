"""Which version of an API the server serves, asked once at start: APIs we read moved between Kubernetes
minors (DeviceTaintRules: ``resource.k8s.io/v1beta2`` in 1.36, ``v1`` from 1.37), and a cluster of either
minor is ours to read. The operator and the web view ask the same question here."""

from __future__ import annotations

from paralleljob.k8s.edge.taintrules import (
    TAINT_RULES_PATH,
    TAINT_RULES_VERSIONS,
    serves_taint_rules,
    taint_rules_path,
)
from paralleljob.k8s.runtime.api import ApiError, Kube


async def served_taint_rules_path(kube: Kube) -> str:
    """The DeviceTaintRules of the newest version served; the 1.36 path when none is (its optional watch then
    says once that device taints come from the ResourceSlices alone)."""
    for version in TAINT_RULES_VERSIONS:
        try:
            if serves_taint_rules(await kube.request("GET", f"/apis/resource.k8s.io/{version}")):
                return taint_rules_path(version)
        except ApiError:
            continue
    return TAINT_RULES_PATH

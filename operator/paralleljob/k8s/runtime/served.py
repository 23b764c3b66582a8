"""Which version of an API the server serves, asked once at start: APIs we read moved between Kubernetes
minors (PodGroups and Workloads: ``scheduling.k8s.io/v1alpha2`` in 1.36, ``v1beta1`` in 1.37 and 1.38, ``v1``
in a later release that lists them there; DeviceTaintRules: ``resource.k8s.io/v1beta2`` in 1.36, ``v1`` from
1.37), and a cluster of any of these minors is ours to read. The operator and the web view ask the same
questions here."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from paralleljob.k8s.edge.parse.nativegroups import DEFAULT_VERSION, SCHEDULING_GROUP, served_version
from paralleljob.k8s.edge.parse.taintrules import (
    TAINT_RULES_PATH,
    TAINT_RULES_VERSIONS,
    serves_taint_rules,
    taint_rules_path,
)
from paralleljob.k8s.runtime.api import ApiError, Kube

log = logging.getLogger("paralleljob.k8s")


@dataclass(frozen=True, slots=True)
class ServedApis:
    """The versions the operator watches of the APIs that moved between minors."""

    gang_version: str = DEFAULT_VERSION
    taint_rules_path: str = TAINT_RULES_PATH


async def served_apis(kube: Kube, dra: bool) -> ServedApis:
    """Ask once at start (DeviceTaintRules only where DRA is on: without it nothing reads them)."""
    rules = await served_taint_rules_path(kube) if dra else TAINT_RULES_PATH
    return ServedApis(await served_gang_version(kube), rules)


async def served_gang_version(kube: Kube) -> str:
    """The gang API version to watch (a server without the group: the default, whose optional reflectors then
    find nothing)."""
    try:
        discovery = await kube.request("GET", f"/apis/{SCHEDULING_GROUP}")
    except ApiError:
        return DEFAULT_VERSION
    # v1 is served everywhere (PriorityClasses): it counts only where its own resource list names PodGroups
    v1 = None
    if any(isinstance(v, dict) and v.get("version") == "v1" for v in discovery.get("versions") or []):
        with contextlib.suppress(ApiError):
            v1 = await kube.request("GET", f"/apis/{SCHEDULING_GROUP}/v1")
    version = served_version(discovery, v1)
    log.info("gang API: watching %s/%s PodGroups and Workloads", SCHEDULING_GROUP, version)
    return version


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

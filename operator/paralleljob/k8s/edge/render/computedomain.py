"""ComputeDomains for jobs that use NVLink across the trays of a clique, as plain dicts (pure, tested alone).

NVIDIA's DRA driver (driver ``compute-domain.nvidia.com``) sets up the IMEX channel that NVLink across trays
needs through a ``ComputeDomain`` (``resource.nvidia.com/v1beta1``). Its fields, from the driver's API types:

- ``spec.channel.resourceClaimTemplate.name`` (required): the ResourceClaimTemplate the driver's controller
  creates in the ComputeDomain's namespace; every pod of the workload references it;
- ``spec.channel.allocationMode``: ``Single`` (the default: one channel) or ``All``;
- ``spec.numNodes``: deprecated, 0 by default (the driver no longer waits for that many IMEX daemons);
- the spec is immutable (a CEL rule ``self == oldSelf``); ``status.status`` is ``Ready``/``NotReady`` and
  ``status.nodes`` lists the nodes that joined (name, IP, clique ID, index, status).

The driver does not place pods: the scheduler must keep them inside one clique (``nvidia.com/gpu.clique``),
and a node joins at most one ComputeDomain. So a job gets one ComputeDomain per clique it uses, owned by
the ParallelJob and named after it and the clique, and each tray pod references the claim template of its
clique's (``spec.resourceClaims`` and its container's ``resources.claims``). The name is a function of the
clique, not of its order in the placement: a job re-placed onto other cliques gets new names, so a
ComputeDomain never changes clique under a live name and the one of a clique left behind can be told apart
(``plan/pods/computedomains.py`` deletes it).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.edge.constants import KIND as JOB_KIND

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
PLURAL = "computedomains"
KIND = "ComputeDomain"
DOMAINS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"  # every namespace's, for the operator's watch
DRIVER = "compute-domain.nvidia.com"
CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"  # the class the driver's template asks for
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # <ClusterUUID>.<CliqueID>, on every tray of a clique
CLIQUE_ANNOTATION = "paralleljob.dev/nvlink-clique"  # which clique a ComputeDomain of ours serves
CLAIM_NAME = "nvlink-channel"  # the pod's name for the channel claim


def compute_domain_name(job: str, clique: str) -> str:
    """The job's ComputeDomain in ``clique``: a digest of the clique, since a clique ID (``<ClusterUUID>.<n>``)
    may hold characters a name may not, and a readable prefix would not tell two clusters' cliques apart."""
    return f"{job}-nvl-{hashlib.sha256(clique.encode()).hexdigest()[:10]}"


def claim_template_name(domain: str) -> str:
    return f"{domain}-channel"


def group_channel_template(group: str) -> str:
    """The channel claim template of a pod group's ComputeDomain. A pod's ``spec.resourceClaims`` cannot be
    changed once it exists (not even while it is scheduling-gated), and a group's pods are made by another
    controller before the clique is chosen, so their template names this one fixed name (docs/pod-groups.md)."""
    return f"{group}-nvlink-channel"


def compute_domain_manifest(
    namespace: str,
    domain: str,
    clique: str,
    owner: Mapping[str, Any],
    labels: Mapping[str, str],
    template: str = "",
) -> dict[str, Any]:
    """One ComputeDomain, owned by ``owner`` (an ownerReference), serving the trays of ``clique``; its channel
    claim template is ``template`` (default: named after the domain)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": domain,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": {CLIQUE_ANNOTATION: clique},
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            "numNodes": 0,
            "channel": {
                "resourceClaimTemplate": {"name": template or claim_template_name(domain)},
                "allocationMode": "Single",
            },
        },
    }


def domains_for(job: str, pod_cliques: Sequence[str]) -> dict[str, str]:
    """clique -> ComputeDomain name, in the order the pods (by node rank) first meet each clique."""
    return {clique: compute_domain_name(job, clique) for clique in dict.fromkeys(pod_cliques)}


@dataclass(frozen=True, slots=True)
class DomainInfo:
    """A ComputeDomain of ours as the operator reads it (watched by our managed-by label)."""

    namespace: str
    name: str
    uid: str
    clique: str  # its CLIQUE_ANNOTATION; empty when missing (then any pod of its job may use it)
    owner_uid: str  # the ParallelJob's UID from its ownerReference; empty when it has none
    deleting: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_domain(body: Mapping[str, Any]) -> DomainInfo:
    meta = body.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == JOB_KIND]
    return DomainInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        clique=str((meta.get("annotations") or {}).get(CLIQUE_ANNOTATION, "")),
        owner_uid=str(owners[0].get("uid", "")) if owners else "",
        deleting=bool(meta.get("deletionTimestamp")),
    )


def with_channel_claim(pod: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """``pod`` referencing its ComputeDomain's claim template, from the pod and from every container."""
    out = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    claims = [c for c in spec.get("resourceClaims") or [] if c.get("name") != CLAIM_NAME]
    claims.append({"name": CLAIM_NAME, "resourceClaimTemplateName": claim_template_name(domain)})
    spec["resourceClaims"] = claims
    for container in spec.get("containers") or []:
        resources = container.setdefault("resources", {})
        mine = [c for c in resources.get("claims") or [] if c.get("name") != CLAIM_NAME]
        resources["claims"] = [*mine, {"name": CLAIM_NAME}]
    return out


def channel_claim_template(namespace: str, name: str, domain_uid: str) -> dict[str, Any]:
    """The ResourceClaimTemplate the driver's controller writes for a ComputeDomain (its workload template:
    one request ``channel`` of the default-channel DeviceClass, the channel config as opaque parameters).
    The dev cluster's stand-in controller creates it; the operator only references it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "resource.nvidia.com/computeDomain": domain_uid,
                "resource.nvidia.com/computeDomainTarget": "Workload",
            },
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_DEVICE_CLASS}}],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": DRIVER,
                                "parameters": {
                                    "apiVersion": f"{GROUP}/{VERSION}",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": domain_uid,
                                    "allocationMode": "Single",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


_CLIQUE = re.compile(r"^[0-9A-Za-z-]+\.[0-9]+$")


def clique_of_labels(labels: Mapping[str, str]) -> str | None:
    """A node's NVLink clique from its label, None when it has none (HGX) or the value is malformed."""
    value = str(labels.get(CLIQUE_LABEL, "")).strip()
    return value if _CLIQUE.match(value) else None

"""Picking objects out of a rendered chart, and the RBAC the operator is expected to have.

:data:`OPERATOR_RULES` is the contract between the chart and ``operator/paralleljob/k8s/``: every call the
operator makes needs one of these, and nothing else is granted (docs/packaging.md has the same table). With
``operator.namespaces`` set, :data:`WORKLOAD_RULES` move into a Role in each of those namespaces.
"""

from __future__ import annotations

from typing import Any

# (apiGroup, resource) -> verbs. Always cluster-wide: what the operator reads about the whole cluster.
CLUSTER_RULES: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset({"list", "watch"}),
    ("", "nodes"): frozenset({"list", "watch"}),
    ("paralleljob.dev", "paralleljobqueues"): frozenset({"list", "watch"}),
    ("paralleljob.dev", "paralleljobqueues/status"): frozenset({"patch"}),
    ("resource.k8s.io", "resourceslices"): frozenset({"list", "watch"}),  # DRA: GPUs as devices (dra.driver)
    ("resource.k8s.io", "resourceclaims"): frozenset({"list", "watch"}),  # DRA: devices others hold
    ("resource.k8s.io", "resourceclaims/binding"): frozenset({"patch"}),  # DRA: allocating (checked cluster-wide)
    ("resource.k8s.io", "devicetaintrules"): frozenset({"list", "watch"}),  # DRA: device taints as GPU health
    ("scheduling.k8s.io", "podgroups"): frozenset({"list", "watch"}),  # Kubernetes' gang API: groups we place
    ("scheduling.k8s.io", "workloads"): frozenset({"list", "watch"}),  # and the shape their Workload declares
    ("scheduling.k8s.io", "compositepodgroups"): frozenset({"list", "watch"}),  # 1.38: children as one gang
    ("resource.nvidia.com", "computedomains"): frozenset({"list", "watch"}),  # NVL72: ours, by our label
}
# What it does to jobs and their workers: cluster-wide, or per namespace when operator.namespaces is set.
WORKLOAD_RULES: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset({"get", "create", "delete", "patch"}),
    ("", "pods/binding"): frozenset({"create"}),
    ("", "services"): frozenset({"create", "update"}),  # update: an elastic job's <job>-rdzv follows its host
    ("", "configmaps"): frozenset({"create", "update"}),  # an elastic job's <job>-replicas ConfigMap
    ("", "events"): frozenset({"create"}),
    ("paralleljob.dev", "paralleljobs"): frozenset({"get", "list", "watch", "create"}),
    ("paralleljob.dev", "paralleljobs/status"): frozenset({"patch"}),
    ("scheduling.k8s.io", "podgroups/status"): frozenset({"patch"}),  # PodGroupScheduled, as kube-scheduler
    ("scheduling.k8s.io", "compositepodgroups/status"): frozenset({"patch"}),  # CompositePodGroupInitiallyScheduled
    # NVL72: one per clique a job's trays use; deleted when its placement leaves the clique
    ("resource.nvidia.com", "computedomains"): frozenset({"create", "delete"}),
    ("resource.k8s.io", "resourceclaims"): frozenset({"get", "create", "delete"}),  # DRA: a claim per worker
    ("resource.k8s.io", "resourceclaims/status"): frozenset({"patch"}),
}


def merged(*tables: dict[tuple[str, str], frozenset[str]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for table in tables:
        for key, verbs in table.items():
            out.setdefault(key, set()).update(verbs)
    return out


# The ClusterRole of the default install (every namespace).
OPERATOR_RULES = merged(CLUSTER_RULES, WORKLOAD_RULES)


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if o["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} named *{name_suffix}, got {len(found)}"
    return found[0]


def flatten_rules(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """(group, resource) -> verbs over every rule (rules with resourceNames included)."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                out.setdefault((group, resource), set()).update(rule.get("verbs", []))
    return out

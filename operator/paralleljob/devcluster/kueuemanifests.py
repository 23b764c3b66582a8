"""What the dev cluster applies for Kueue, made from the files of its pinned module (copied next to the binary
by the build): its Configuration, its webhook and CRD-conversion registrations pointed at loopback, and its
roles bound to its own user. Pure transforms of those files, so they are tested without a cluster.

Choices that differ from upstream's ``config/default`` (each because there is no Service, Secret or Pod
here), and nothing else: leader election off (one instance); ``internalCertManagement`` off, the serving
certificate coming from the cluster's CA; webhooks, metrics and probes on 127.0.0.1; the visibility server
(``VisibilityOnDemand``, an aggregated API for listing pending workloads) off, since it would need an
APIService and a certificate at a fixed path; and only the integrations the benchmarks use (``FRAMEWORKS``),
with the webhooks of the others left unregistered: their handlers would be no-ops, but the pod one would
still sit in front of every pod's create, ParallelJob's included. Everything else (concurrency, feature
gates, TAS among them) is upstream's shipped configuration or Kueue's own default, and so is the client's
request limit unless a benchmark asks for another (``client_qps``: QPS, with a burst of twice that).
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from paralleljob.devcluster import crds
from paralleljob.devcluster.certs import KUEUE_USER

MODULE = Path("module/config/components")
NAME_PREFIX = "kueue-"  # upstream's kustomization prefixes every name with this
NAMESPACE = "kueue-system"
FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")
_FRAMEWORK_GROUPS = {"batch/job": "batch", "jobset.x-k8s.io/jobset": "jobset.x-k8s.io"}
_OWN_GROUP = "kueue.x-k8s.io"
_CLUSTER_ROLES = ("role.yaml", "metrics_auth_role.yaml")
_NAMESPACED_ROLES = ("manager_secrets_role.yaml", "manager_clusterprofiles_role.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def configuration(
    folder: Path, cert_dir: Path, webhook_port: int, metrics_port: int, health_port: int, client_qps: int = 0
) -> dict[str, Any]:
    """Upstream's shipped Configuration (config/components/manager) with the loopback changes above; a
    ``client_qps`` above 0 replaces its ``clientConnection`` limit."""
    config = documents(folder / MODULE / "manager" / "controller_manager_config.yaml")[0]
    config.update(
        namespace=NAMESPACE,
        leaderElection={"leaderElect": False},
        internalCertManagement={"enable": False},
        webhook={"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        metrics={**config.get("metrics", {}), "bindAddress": f"127.0.0.1:{metrics_port}"},
        health={"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        integrations={**config.get("integrations", {}), "frameworks": list(FRAMEWORKS)},
        featureGates={**config.get("featureGates", {}), "VisibilityOnDemand": False},
    )
    if client_qps > 0:
        config["clientConnection"] = {**config.get("clientConnection", {}), "qps": client_qps, "burst": 2 * client_qps}
    return config


def _client(port: int, path: str, ca_bundle: bytes) -> dict[str, str]:
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_bundle).decode()}


def _served(webhook: dict[str, Any]) -> bool:
    groups = {_OWN_GROUP, *(_FRAMEWORK_GROUPS[f] for f in FRAMEWORKS)}
    return all(set(rule.get("apiGroups", [])) <= groups for rule in webhook.get("rules", []))


def _merge_by_name(configuration: dict[str, Any], patch: dict[str, Any]) -> None:
    """The strategic-merge patches of upstream's webhook kustomization: fields set on the webhook of that
    name (its namespaceSelector), the webhooks list being merged by name as kustomize does."""
    webhooks = {w["name"]: w for w in configuration["webhooks"]}
    for change in patch.get("webhooks", []):
        if change["name"] in webhooks:
            webhooks[change["name"]].update({k: v for k, v in change.items() if k != "name"})


def webhook_configurations(folder: Path, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Upstream's webhook configurations, patched as its kustomization patches them, renamed with its prefix,
    kept to Kueue's own kinds and the enabled integrations, and pointed at loopback."""
    directory = folder / MODULE / "webhook"
    patches = [
        yaml.safe_load(p["patch"]) for p in yaml.safe_load((directory / "kustomization.yaml").read_text())["patches"]
    ]
    configurations = documents(directory / "manifests.yaml")
    for configuration in configurations:
        for patch in patches:
            if patch.get("kind") == configuration["kind"]:
                _merge_by_name(configuration, patch)
        configuration["metadata"] = {"name": NAME_PREFIX + configuration["metadata"]["name"]}
        configuration["webhooks"] = [w for w in configuration["webhooks"] if _served(w)]
        for webhook in configuration["webhooks"]:
            webhook["clientConfig"] = _client(port, webhook["clientConfig"]["service"]["path"], ca_bundle)
    return configurations


def conversions(folder: Path, port: int, ca_bundle: bytes) -> dict[str, dict[str, Any]]:
    """CRD name -> its ``spec.conversion``: the conversion webhooks upstream's CRD kustomization enables
    (the patches it lists, not every file in patches/), calling Kueue on loopback."""
    directory = folder / MODULE / "crd"
    listed = yaml.safe_load((directory / "kustomization.yaml").read_text()).get("patches") or []
    result = {}
    for entry in listed:
        patch = yaml.safe_load((directory / entry["path"]).read_text())
        conversion = copy.deepcopy(patch["spec"]["conversion"])
        webhook = conversion["webhook"]
        webhook["clientConfig"] = _client(port, webhook["clientConfig"]["service"]["path"], ca_bundle)
        result[patch["metadata"]["name"]] = conversion
    return result


def crd_documents(folder: Path, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The module's CRDs as upstream's kustomization applies them: with the conversion webhooks it enables,
    here calling Kueue on loopback. Installed so from the start (before Kueue listens: the API server
    converts only when a client asks for another version), since changing a CRD's conversion later rebuilds
    its storage, and lists of it are refused with 429 until its watch cache fills again."""
    converted = conversions(folder, port, ca_bundle)
    documents = crds.crd_documents(folder / MODULE / "crd" / "bases")
    for document in documents:
        if document["metadata"]["name"] in converted:
            document["spec"]["conversion"] = converted[document["metadata"]["name"]]
    return documents


def _binding(kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUEUE_USER}],
    }


def rbac(folder: Path) -> list[dict[str, Any]]:
    """The ClusterRoles and (in ``NAMESPACE``) Roles upstream binds to Kueue's service account, each with a
    binding to Kueue's user here instead, in the order they are to be applied."""
    result: list[dict[str, Any]] = []
    for files, namespace in ((_CLUSTER_ROLES, None), (_NAMESPACED_ROLES, NAMESPACE)):
        for file in files:
            for role in documents(folder / MODULE / "rbac" / file):
                name = NAME_PREFIX + role["metadata"]["name"]
                role["metadata"] = {"name": name, **({"namespace": namespace} if namespace else {})}
                result += [role, _binding(role["kind"], name, namespace)]
    return result

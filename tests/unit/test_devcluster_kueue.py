"""Kueue in the dev cluster, without a cluster: its pin and cache folder, and what the cluster applies for it,
made from files of the shape of its module's (config/components/): the Configuration, the webhook and CRD
conversion registrations on loopback, the roles bound to its user. The e2e test applies the real ones."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from paralleljob.devcluster import build
from paralleljob.devcluster.certs import KUEUE_USER
from paralleljob.devcluster.cluster import up
from paralleljob.devcluster.kueue import KueueNeedsRoot
from paralleljob.devcluster.kueuemanifests import (
    MODULE,
    configuration,
    conversions,
    crd_documents,
    rbac,
    webhook_configurations,
)
from paralleljob.devcluster.versions import ADDONS, addon_dir, addon_version, binaries_dir, deploy_dir, ldflags


def hook(name: str, path: str, group: str, resource: str) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}],
    }


def write(path: Path, documents: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(documents))


def write_module(folder: Path) -> None:
    components = folder / MODULE
    hooks = [
        ("m", "workload", "kueue.x-k8s.io", "workloads"),
        ("m", "job", "batch", "jobs"),
        ("m", "jobset", "jobset.x-k8s.io", "jobsets"),
        ("m", "pod", "", "pods"),
        ("m", "rayjob", "ray.io", "rayjobs"),
    ]
    manifests = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": f"{word}-webhook-configuration"},
            "webhooks": [hook(f"{letter}{name}.kb.io", f"/{word[:-3]}-{name}", g, r) for _, name, g, r in hooks],
        }
        for kind, word, letter in (
            ("MutatingWebhookConfiguration", "mutating", "m"),
            ("ValidatingWebhookConfiguration", "validating", "v"),
        )
    ]
    write(components / "webhook" / "manifests.yaml", manifests)
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["x"]}]}
    patches = [
        {"kind": "MutatingWebhookConfiguration", "webhooks": [{"name": "mjob.kb.io", "namespaceSelector": selector}]},
        {"kind": "ValidatingWebhookConfiguration", "webhooks": [{"name": "vpod.kb.io", "namespaceSelector": selector}]},
    ]
    kustomization = {"resources": ["manifests.yaml"], "patches": [{"patch": yaml.safe_dump(p)} for p in patches]}
    write(components / "webhook" / "kustomization.yaml", [kustomization])

    def conversion_patch(plural: str) -> dict[str, Any]:
        service = {"namespace": "system", "name": "webhook-service", "path": "/convert"}
        webhook = {"clientConfig": {"service": service}, "conversionReviewVersions": ["v1"]}
        return {
            "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
            "spec": {"conversion": {"strategy": "Webhook", "webhook": webhook}},
        }

    for plural in ("workloads", "resourceflavors"):
        write(components / "crd" / "patches" / f"webhook_in_{plural}.yaml", [conversion_patch(plural)])
    # upstream lists the workloads patch and leaves the resourceflavors one commented out
    write(components / "crd" / "kustomization.yaml", [{"patches": [{"path": "patches/webhook_in_workloads.yaml"}]}])

    shipped = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "x"},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job", "pod", "ray.io/rayjob", "jobset.x-k8s.io/jobset"]},
    }
    write(components / "manager" / "controller_manager_config.yaml", [shipped])

    def role(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, "rules": []}

    write(components / "rbac" / "role.yaml", [role("ClusterRole", "manager-role")])
    write(components / "rbac" / "metrics_auth_role.yaml", [role("ClusterRole", "metrics-auth-role")])
    write(components / "rbac" / "manager_secrets_role.yaml", [role("Role", "manager-secrets-role", "system")])
    write(components / "rbac" / "manager_clusterprofiles_role.yaml", [role("Role", "manager-cp-role", "system")])


def test_webhooks_are_patched_renamed_kept_to_the_enabled_integrations_and_pointed_at_loopback(tmp_path: Path) -> None:
    write_module(tmp_path)
    configurations = webhook_configurations(tmp_path, 41234, b"CA PEM")

    names = [c["metadata"]["name"] for c in configurations]
    assert names == ["kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"]
    kept = [[w["name"] for w in c["webhooks"]] for c in configurations]
    # the pod and Ray webhooks belong to integrations left off: not registered, so no pod create waits on them
    assert kept == [
        ["mworkload.kb.io", "mjob.kb.io", "mjobset.kb.io"],
        ["vworkload.kb.io", "vjob.kb.io", "vjobset.kb.io"],
    ]
    mutating = {w["name"]: w for w in configurations[0]["webhooks"]}
    assert mutating["mjob.kb.io"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["x"]  # upstream's patch
    assert "namespaceSelector" not in mutating["mworkload.kb.io"]
    for webhook in (w for c in configurations for w in c["webhooks"]):
        client = webhook["clientConfig"]
        assert "service" not in client and client["url"].startswith("https://127.0.0.1:41234/")
        assert base64.b64decode(client["caBundle"]) == b"CA PEM"
        assert webhook["failurePolicy"] == "Fail"


def test_conversion_webhooks_are_those_upstreams_kustomization_lists(tmp_path: Path) -> None:
    write_module(tmp_path)
    result = conversions(tmp_path, 41234, b"CA PEM")

    assert list(result) == ["workloads.kueue.x-k8s.io"]
    webhook = result["workloads.kueue.x-k8s.io"]["webhook"]
    assert result["workloads.kueue.x-k8s.io"]["strategy"] == "Webhook"
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:41234/convert"
    assert webhook["conversionReviewVersions"] == ["v1"]


def test_the_crds_are_installed_with_those_conversion_webhooks_from_the_start(tmp_path: Path) -> None:
    write_module(tmp_path)
    for plural in ("workloads", "resourceflavors"):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.kueue.x-k8s.io"}, "spec": {"group": "kueue.x-k8s.io"}}  # fmt: skip
        write(tmp_path / MODULE / "crd" / "bases" / f"kueue.x-k8s.io_{plural}.yaml", [crd])
    documents = {d["metadata"]["name"]: d for d in crd_documents(tmp_path, 41234, b"CA PEM")}

    assert sorted(documents) == ["resourceflavors.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"]
    conversion = documents["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conversion["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:41234/convert"
    assert "conversion" not in documents["resourceflavors.kueue.x-k8s.io"]["spec"]  # not listed upstream


def test_configuration_is_upstreams_with_only_the_loopback_changes(tmp_path: Path) -> None:
    write_module(tmp_path)
    config = configuration(tmp_path, tmp_path / "certs", 1001, 1002, 1003)

    assert config["clientConnection"] == {"qps": 50, "burst": 100}  # upstream's shipped client limits
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1001, "certDir": str(tmp_path / "certs")}
    assert config["metrics"]["bindAddress"] == "127.0.0.1:1002"
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:1003"
    assert config["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset"]
    assert config["featureGates"] == {"VisibilityOnDemand": False}  # TAS is left at Kueue's default (on)
    assert config["namespace"] == "kueue-system"


def test_a_benchmark_may_set_kueues_client_limit_and_nothing_else_changes(tmp_path: Path) -> None:
    write_module(tmp_path)
    shipped = configuration(tmp_path, tmp_path / "certs", 1001, 1002, 1003)
    raised = configuration(tmp_path, tmp_path / "certs", 1001, 1002, 1003, client_qps=400)

    assert raised["clientConnection"] == {"qps": 400, "burst": 800}
    assert {k: v for k, v in raised.items() if k != "clientConnection"} == {
        k: v for k, v in shipped.items() if k != "clientConnection"
    }


def test_roles_are_renamed_and_bound_to_kueues_user(tmp_path: Path) -> None:
    write_module(tmp_path)
    documents = rbac(tmp_path)

    kinds = [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in documents]
    assert kinds == [
        ("ClusterRole", "kueue-manager-role", None),
        ("ClusterRoleBinding", "kueue-manager-role", None),
        ("ClusterRole", "kueue-metrics-auth-role", None),
        ("ClusterRoleBinding", "kueue-metrics-auth-role", None),
        ("Role", "kueue-manager-secrets-role", "kueue-system"),
        ("RoleBinding", "kueue-manager-secrets-role", "kueue-system"),
        ("Role", "kueue-manager-cp-role", "kueue-system"),
        ("RoleBinding", "kueue-manager-cp-role", "kueue-system"),
    ]
    for binding in documents[1::2]:
        assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUEUE_USER}]
        assert binding["roleRef"]["name"] == binding["metadata"]["name"]


def test_kueue_is_pinned_by_its_wrapper_module_and_cached_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLELJOB_CACHE", str(tmp_path))
    version = addon_version("kueue")
    go_mod = (deploy_dir() / "kueue" / "go.mod").read_text()
    assert f"sigs.k8s.io/kueue {version}" in go_mod and "tool sigs.k8s.io/kueue/cmd/kueue" in go_mod
    assert addon_dir("kueue") == tmp_path / "k8s" / f"kueue-controller-manager-{version}"
    assert "kueue" not in binaries_dir().name
    assert f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={version}" in ldflags(ADDONS["kueue"], version)
    shipped = {relative.split("/")[-1] for relative in ADDONS["kueue"].module_files}
    assert {"kueue.x-k8s.io_topologies.yaml", "kueue.x-k8s.io_workloads.yaml", "manifests.yaml"} <= shipped


def test_a_cached_addon_missing_module_files_gets_them_copied_without_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLELJOB_CACHE", str(tmp_path))
    folder = addon_dir("kueue")
    folder.mkdir(parents=True)
    (folder / ADDONS["kueue"].name).write_text("a binary built by an older checkout")
    copied: list[Path] = []

    def copy(go: str, spec: Any, version: str, target: Path) -> None:
        copied.append(target)

    def no_build(*args: object) -> None:
        raise AssertionError("rebuilt a binary that was there")

    monkeypatch.setattr(build, "_go", lambda: "go")
    monkeypatch.setattr(build, "_copy_module_files", copy)
    monkeypatch.setattr(build, "_build_one", no_build)
    assert build.ensure_addon("kueue") == folder
    assert copied == [folder]


def test_up_with_kueue_refuses_without_root_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLELJOB_CACHE", str(tmp_path))
    monkeypatch.setattr("os.geteuid", lambda: 1000)

    def no_build(*args: object) -> None:
        raise AssertionError("up built binaries for a request it must refuse")

    monkeypatch.setattr("paralleljob.devcluster.cluster.ensure_binaries", no_build)
    with pytest.raises(KueueNeedsRoot, match="/etc/kueue/metrics/certs"):
        up("unit", controllers=("jobset", "kueue"))
    assert not (tmp_path / "run").exists()

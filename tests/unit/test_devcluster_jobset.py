"""JobSet in the dev cluster, without a cluster: its pin and cache folder, and its webhook configurations as
the cluster registers them: upstream's manifests with upstream's kustomize patches applied, renamed with
upstream's prefix, and pointed at the controller's loopback port with the cluster's CA. The manifests here
have the shape of the module's (config/components/webhook/); the e2e test registers the real ones."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from paralleljob.devcluster.cluster import up
from paralleljob.devcluster.jobset import webhook_configurations
from paralleljob.devcluster.versions import ADDONS, addon_dir, addon_version, binaries_dir, deploy_dir, ldflags

WEBHOOKS = Path("module/config/components/webhook")


def hook(name: str, path: str) -> dict[str, object]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
    }


def pod_hook_with_selector(name: str, path: str) -> dict[str, object]:
    selected = hook(name, path)
    selected["objectSelector"] = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    return selected


def write_module(folder: Path, mutating_patch: list[dict[str, object]] | None = None) -> None:
    directory = folder / WEBHOOKS
    (directory / "patches").mkdir(parents=True)
    manifests = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [hook("mjobset.kb.io", "/mutate-jobset"), hook("mpod.kb.io", "/mutate--v1-pod")],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [hook("vjobset.kb.io", "/validate-jobset"), hook("vpod.kb.io", "/validate--v1-pod")],
        },
    ]
    (directory / "manifests.yaml").write_text(yaml.safe_dump_all(manifests))
    mutating = mutating_patch or [
        {"op": "replace", "path": "/webhooks/1", "value": pod_hook_with_selector("mpod.kb.io", "/mutate--v1-pod")}
    ]
    validating = [
        {"op": "replace", "path": "/webhooks/1", "value": pod_hook_with_selector("vpod.kb.io", "/validate--v1-pod")}
    ]
    (directory / "patches" / "mutating-patch.yaml").write_text(yaml.safe_dump(mutating))
    (directory / "patches" / "validating-patch.yaml").write_text(yaml.safe_dump(validating))


def test_the_module_webhooks_are_patched_renamed_and_pointed_at_loopback(tmp_path: Path) -> None:
    write_module(tmp_path)
    configurations = webhook_configurations(tmp_path, 41234, b"CA PEM")

    assert [c["metadata"]["name"] for c in configurations] == [
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ]
    for configuration in configurations:
        jobset_hook, pod_hook = configuration["webhooks"]
        assert "objectSelector" not in jobset_hook
        # upstream's patch: the pod webhooks only see JobSet's pods, never the operator's or anyone else's
        assert pod_hook["objectSelector"]["matchExpressions"][0]["key"] == "jobset.sigs.k8s.io/jobset-name"
        for webhook in (jobset_hook, pod_hook):
            client = webhook["clientConfig"]
            assert "service" not in client
            assert client["url"].startswith("https://127.0.0.1:41234/")
            assert base64.b64decode(client["caBundle"]) == b"CA PEM"
    paths = [w["clientConfig"]["url"].split(":41234")[1] for c in configurations for w in c["webhooks"]]
    assert paths == ["/mutate-jobset", "/mutate--v1-pod", "/validate-jobset", "/validate--v1-pod"]


def test_a_patch_of_another_form_is_refused_rather_than_half_applied(tmp_path: Path) -> None:
    write_module(tmp_path, mutating_patch=[{"op": "add", "path": "/webhooks/-", "value": {}}])
    with pytest.raises(RuntimeError, match="unexpected webhook patch"):
        webhook_configurations(tmp_path, 1, b"")


def test_jobset_is_pinned_by_its_wrapper_module_and_cached_apart_from_the_core_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLELJOB_CACHE", str(tmp_path))
    version = addon_version("jobset")
    go_mod = (deploy_dir() / "jobset" / "go.mod").read_text()
    assert f"sigs.k8s.io/jobset {version}" in go_mod and "tool sigs.k8s.io/jobset" in go_mod
    folder = addon_dir("jobset")
    assert folder == tmp_path / "k8s" / f"jobset-controller-manager-{version}"
    assert folder != binaries_dir(), "adding JobSet must not invalidate the core binaries' cache"
    assert "jobset" not in binaries_dir().name
    assert f"-X sigs.k8s.io/jobset/pkg/version.GitVersion={version}" in ldflags(ADDONS["jobset"], version)


def test_up_refuses_an_unknown_controller_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLELJOB_CACHE", str(tmp_path))

    def no_build(*args: object) -> None:
        raise AssertionError("up built binaries for a request it must refuse")

    monkeypatch.setattr("paralleljob.devcluster.cluster.ensure_binaries", no_build)
    with pytest.raises(ValueError, match="unknown controllers volcano"):
        up("unit", controllers=("jobset", "volcano"))
    assert not (tmp_path / "run").exists()

"""The dev cluster's Kubernetes minors: each has a wrapper module pinning that minor, its own cache folder, and
the gates and gang API version its binaries know (a gate a binary does not know stops it at start)."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from paralleljob.devcluster import cli, gangapi, kubeline
from paralleljob.devcluster.cli import register
from paralleljob.devcluster.versions import (
    BINARIES,
    NODE_BINARIES,
    binaries_dir,
    deploy_dir,
    module_path,
    node_binaries_dir,
    versions,
)


@pytest.mark.parametrize("minor", sorted(kubeline.LINES))
def test_each_minor_is_pinned_by_its_own_wrapper_module_and_cached_apart(
    minor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kubeline.ENV, minor)
    pins = versions()
    for name in ("kube-apiserver", "kube-controller-manager"):
        assert pins[name].startswith(f"v{minor}."), (name, pins[name])
    go_mod = (module_path(BINARIES[1]) / "go.mod").read_text()
    staging = set(re.findall(r"^\s+(k8s\.io/[a-z-]+) => k8s\.io/[a-z-]+ (v\S+)", go_mod, re.MULTILINE))
    patch = pins["kube-apiserver"].split(".")[2]
    assert staging and {version for _, version in staging} == {f"v0.{minor.split('.')[1]}.{patch}"}
    assert f"kube-apiserver-{pins['kube-apiserver']}" in binaries_dir().name


def test_the_default_is_1_37_and_etcd_and_kwok_do_not_follow_the_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kubeline.ENV, raising=False)
    assert kubeline.selected().minor == kubeline.DEFAULT == "1.37"
    assert module_path(BINARIES[1]) == deploy_dir() / "kubernetes"
    default = versions()
    monkeypatch.setenv(kubeline.ENV, "1.36")
    older = versions()
    assert module_path(BINARIES[1]) == deploy_dir() / "kubernetes-1.36"
    assert (default["etcd"], default["kwok"]) == (older["etcd"], older["kwok"])
    assert default["kube-apiserver"] != older["kube-apiserver"]


def test_each_minor_gets_the_gates_and_gang_api_its_binaries_know() -> None:
    new, old = kubeline.line("1.37"), kubeline.line("1.36")
    assert gangapi.apiserver_args(new)[0] == "--runtime-config=scheduling.k8s.io/v1beta1=true"
    assert gangapi.apiserver_args(old)[0] == "--runtime-config=scheduling.k8s.io/v1alpha2=true"
    # 1.37 folded GangScheduling into GenericWorkload: passing it would stop every binary at start
    assert "GangScheduling" not in new.gates_flag + new.scheduler_gates_flag
    assert "GangScheduling=true" in old.gates_flag and "GangScheduling=true" in old.scheduler_gates_flag
    assert "--controllers=podgroup-protection-controller" in gangapi.controller_manager_args(new)


def test_an_unsupported_minor_is_refused_with_the_supported_ones() -> None:
    with pytest.raises(kubeline.UnsupportedKubernetes, match=r"1\.35 is not supported .*1\.36, 1\.37"):
        kubeline.line("1.35")
    assert kubeline.line("v1.36").minor == "1.36"


def test_build_and_up_take_kubernetes_and_pass_it_to_what_they_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kubeline.ENV, raising=False)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    seen: list[str] = []

    def handler(_: argparse.Namespace) -> int:
        seen.append(os.environ.get(kubeline.ENV, ""))  # what a spawned control plane inherits
        return 0

    args = parser.parse_args(["dev-cluster", "build", "--kubernetes", "1.36"])
    assert cli._with_line(handler)(args) == 0 and seen == ["1.36"]
    with pytest.raises(SystemExit):
        parser.parse_args(["dev-cluster", "up", "--kubernetes", "1.35"])


def test_our_node_programs_live_once_and_only_the_kubelet_follows_the_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kubeline.ENV, "1.36")
    folders = {spec.name: module_path(spec).name for spec in NODE_BINARIES}
    assert folders["kubelet"] == folders["kube-scheduler"] == "kubernetes-1.36"
    assert folders["fakegpu"] == folders["pause"] == "kubernetes"  # the device plugin API is the same in both
    assert not (deploy_dir() / "kubernetes-1.36" / "fakegpu").exists()
    older = node_binaries_dir()
    monkeypatch.setenv(kubeline.ENV, "1.37")
    assert node_binaries_dir() != older  # each kubelet its own folder

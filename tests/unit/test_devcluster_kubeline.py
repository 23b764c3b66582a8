"""The dev cluster's Kubernetes minors: each has a wrapper module pinning that minor, its own cache folder, and
the gates and gang API version its binaries know (a gate a binary does not know stops it at start)."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from paralleljob.devcluster import cli, cluster, gangapi, kubeline
from paralleljob.devcluster.cli import register
from paralleljob.devcluster.versions import (
    ADDONS,
    BINARIES,
    NODE_BINARIES,
    binaries_dir,
    deploy_dir,
    go_toolchain,
    module_path,
    node_binaries_dir,
    pinned_version,
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
    patch = pins["kube-apiserver"].split(".", 2)[2]  # "2", or "0-beta.0" for a pre-release
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


def test_1_38_turns_on_composite_pod_groups_and_its_gates_are_the_ones_its_source_names() -> None:
    line = kubeline.line("1.38")
    assert gangapi.apiserver_args(line)[0] == "--runtime-config=scheduling.k8s.io/v1beta1=true"  # no v1 gang API
    assert "CompositePodGroup=true" in line.gates_flag and "CompositePodGroup=true" in line.scheduler_gates_flag
    assert line.composite_groups and not kubeline.line("1.37").composite_groups
    assert pinned_version(deploy_dir() / line.module_dir, "k8s.io/kubernetes") == "v1.38.0-beta.0"
    # as named in v1.38.0-beta.0's pkg/features/kube_features.go (a gate a binary does not know stops it)
    assert set(line.gang_gates) >= {"GenericWorkload", "TopologyAwareWorkloadScheduling", "CompositePodGroup"}
    assert "GangScheduling" not in line.gates_flag + line.scheduler_gates_flag


def test_only_the_1_38_kubernetes_binaries_are_built_with_go_1_27(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kubeline.ENV, "1.38")
    assert module_path(BINARIES[1]) == deploy_dir() / "kubernetes-1.38"
    assert go_toolchain(BINARIES[1]) == "go1.27.3"  # k8s.io/kubernetes v1.38.0-beta.0 says go 1.27.0
    assert "go 1.27" in (deploy_dir() / "kubernetes-1.38" / "go.mod").read_text()
    etcd, kwok = (spec for spec in BINARIES if spec.name in ("etcd", "kwok"))
    assert go_toolchain(etcd) == go_toolchain(kwok) == go_toolchain(ADDONS["jobset"]) == "local"
    monkeypatch.setenv(kubeline.ENV, "1.37")
    assert {go_toolchain(spec) for spec in BINARIES} == {"local"}  # the default keeps the machine's Go
    monkeypatch.setenv(kubeline.ENV, "1.36")
    assert {go_toolchain(spec) for spec in BINARIES} == {"local"}


def test_1_38_refuses_real_nodes_before_building_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kubeline.ENV, "1.38")

    def no_build(*_: object, **__: object) -> None:
        raise AssertionError("nothing may be built for a cluster that is refused")

    monkeypatch.setattr(cluster, "ensure_binaries", no_build)
    with pytest.raises(ValueError, match=r"Kubernetes 1\.38 has no kubelet here .*real nodes need 1\.36 or 1\.37"):
        cluster.up("never-started", real_nodes=2)
    assert not kubeline.line("1.38").kubelet and kubeline.line("1.37").kubelet

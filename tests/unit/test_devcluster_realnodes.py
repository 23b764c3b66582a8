"""The real nodes' pieces that need no root: addresses, configurations, the pause image's archive, and
what the host check says is missing."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from paralleljob.devcluster import hostcheck, realnode
from paralleljob.devcluster.nodeimages import PAUSE_IMAGE, write_pause_archive
from paralleljob.devcluster.nodenet import NodeNet, cni_config, switch_netns
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.realnodes import labels, node_objects


def test_nodes_get_distinct_addresses_and_pod_cidrs_apart_from_each_other() -> None:
    nets = [NodeNet("c", f"real-node-{i}", i) for i in range(4)]
    assert len({n.node_ip for n in nets}) == 4 and len({n.pod_cidr for n in nets}) == 4
    assert {n.netns for n in nets}.isdisjoint({switch_netns("c")})
    assert NodeNet("a", "real-node-0", 0).netns != NodeNet("b", "real-node-0", 0).netns


def test_cni_config_keeps_leases_in_the_node_folder(tmp_path: Path) -> None:
    net = NodeNet("c", "real-node-1", 1)
    config = cni_config(net, tmp_path / "ipam")
    bridge = config["plugins"][0]  # type: ignore[index]
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "ipam")
    assert bridge["ipam"]["ranges"] == [[{"subnet": net.pod_cidr}]]
    assert config["name"] == "pj-c"  # cleanup finds libcni's cache entries by this prefix


def test_kubelet_and_containerd_configs_keep_everything_in_the_node_folder(tmp_path: Path) -> None:
    (node,) = node_objects("c", tmp_path, 1)
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    realnode.write_configs(node, tmp_path / "ca.crt", "token", 4, labels(NodeShape(), 4), "dns-token")
    kubelet = json.loads((node.directory / "kubelet.yaml").read_text())
    assert kubelet["cgroupRoot"] == "/pj-c-real-node-0"
    assert kubelet["podLogsDir"].startswith(str(tmp_path))
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"
    assert kubelet["oomScoreAdj"] == 0 and kubelet["failCgroupV1"] is False
    containerd = (node.directory / "containerd.toml").read_text()
    assert "restrict_oom_score_adj = true" in containerd
    assert f'sandbox_image = "{PAUSE_IMAGE}"' in containerd
    for line in containerd.splitlines():
        if line.strip().startswith(("root =", "state =", "address =", "Root =", "conf_dir =", "path =")):
            assert str(tmp_path) in line, line
    assert "gpu.count=4" in (node.directory / "labels").read_text()


def test_pause_archive_is_a_docker_archive_with_one_layer(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF fake")
    archive = write_pause_archive(binary, tmp_path / "pause.tar")
    with tarfile.open(archive) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        (entry,) = manifest
        assert entry["RepoTags"] == [PAUSE_IMAGE]
        config = json.loads(tar.extractfile(entry["Config"]).read())  # type: ignore[union-attr]
        assert config["config"]["Entrypoint"] == ["/pause"]
        (layer_name,) = entry["Layers"]
        with tarfile.open(fileobj=tar.extractfile(layer_name)) as layer:
            member = layer.getmember("pause")
            assert member.mode == 0o755 and member.uid == 0


def test_host_check_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostcheck.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(hostcheck.shutil, "which", lambda program: None if program == "socat" else "/bin/x")
    problems = hostcheck.missing()
    assert any("need root" in p and "uid 1000" in p for p in problems)
    assert any("socat" in p and "prereqs" in p for p in problems)
    # Without root nothing is installed: the reason comes back instead.
    assert any("need root" in p for p in hostcheck.install(lambda _: None))

"""A real node with DRA, the parts that need no root: containerd 2.x's configuration, the devices the plugin
publishes (the kwok nodes' shape), the socket-path check, and where the builds are cached."""

from __future__ import annotations

import json
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from paralleljob.devcluster import dra, dranode, realnode, versions
from paralleljob.devcluster.nodeimages import PAUSE_IMAGE
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.realnodes import labels, node_objects
from paralleljob.k8s.edge.parse.dra import parse_slice


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A run directory as short as a real one: pytest's tmp_path is too deep for the plugin's sockets."""
    with tempfile.TemporaryDirectory(prefix="pj-") as folder:
        yield Path(folder)


def _node(tmp_path: Path) -> realnode.RealNode:
    (node,) = node_objects("c", tmp_path, 1)
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    realnode.write_configs(node, tmp_path / "ca.crt", "token", 4, labels(NodeShape(), 4), "dns-token")
    dranode.write_configs(node, NodeShape(gpu_api="dra"), 4, tmp_path / "bin" / "containerd-shim-runc-v2")
    return node


def test_containerd_2_reads_cdi_specs_from_the_node_folder_and_runs_its_own_shim(short_dir: Path) -> None:
    tmp_path = short_dir
    node = _node(tmp_path)
    config = tomllib.loads((node.directory / "containerd.toml").read_text())
    assert config["version"] == 3
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["cdi_spec_dirs"] == [str(dranode.cdi_dir(node))]
    assert runtime["restrict_oom_score_adj"] is True and runtime["netns_mounts_under_state_dir"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_path"] == str(tmp_path / "bin" / "containerd-shim-runc-v2")  # never Debian's 1.6 shim
    assert runc["options"]["Root"].startswith(str(tmp_path))
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE_IMAGE
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]  # one host socket for every node
    for key in ("root", "state"):
        assert config[key].startswith(str(tmp_path))
    assert config["grpc"]["address"] == str(node.containerd_socket)
    assert dranode.cdi_dir(node).is_dir() and dranode.registrar_dir(node).is_dir()


def test_the_plugins_devices_are_what_the_kwok_nodes_publish(short_dir: Path) -> None:
    node = _node(short_dir)
    devices = json.loads((node.directory / "devices.json").read_text())
    shape = NodeShape(gpus_per_node=4, gpu_api="dra")
    assert devices == dra.resource_slice_manifest(shape, node.name, "uid")["spec"]["devices"]
    # and the operator reads them as four GPUs, gpu-0 first, with the node's UUIDs
    parsed = parse_slice({"spec": {"driver": dra.DRIVER, "nodeName": node.name, "devices": devices}})
    assert [d.name for d in parsed.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert [d.uuid for d in parsed.devices] == [dra.device_uuid(node.name, i) for i in range(4)]


def test_a_run_directory_too_deep_for_the_plugins_sockets_is_refused_with_the_reason(short_dir: Path) -> None:
    (node,) = node_objects("c", short_dir, 1)
    dranode.check_socket_paths(node)
    (node,) = node_objects("c", short_dir / ("d" * 60), 1)
    with pytest.raises(RuntimeError, match="longer than a unix socket path"):
        dranode.check_socket_paths(node)


def test_the_dra_node_build_is_keyed_on_containerd_and_the_plugins_sources() -> None:
    target = versions.dra_node_binaries_dir()
    containerd = versions.pinned_version(versions.deploy_dir() / "containerd", "github.com/containerd/containerd/v2")
    assert target.name.startswith(f"dranode-{containerd}-")
    assert {spec.name for spec in versions.DRA_NODE_BINARIES} == {
        "containerd", "containerd-shim-runc-v2", "ctr", "fakedra",
    }  # fmt: skip
    assert containerd.startswith("v2.")  # CDI in the CRI plugin (Debian 12's 1.6 has none)

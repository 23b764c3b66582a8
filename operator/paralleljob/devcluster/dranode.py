"""What a real (kubelet) node runs differently when its GPUs are DRA devices (``up --gpu-api dra --real-nodes N``).

Instead of Debian's containerd 1.6 (whose CRI plugin cannot apply CDI) the node runs containerd 2.x built from
``deploy/devcluster/containerd`` with that version's runc shim; its CRI plugin reads CDI specs from the node's
own ``cdi/`` folder. Instead of the device plugin it runs ``fakedra`` (``deploy/devcluster/fakedra``), a DRA
kubelet plugin under NVIDIA's driver name that publishes the node's ResourceSlice with the devices this
module writes (``dra.gpu_device``, exactly what the kwok nodes publish) and, when the kubelet prepares a
claim, writes the CDI spec that hands the container the claim's devices: ``NVIDIA_VISIBLE_DEVICES`` (their
GPU indices, in the claim's order) and ``/run/paralleljob/gpus`` naming them.

The plugin speaks to the API server as its node (the kubelet's credentials); the ``system:node`` role does not
let a node write ResourceSlices, so ``bind_plugin_role`` grants that, as a driver's chart grants its
DaemonSet's service account.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from paralleljob.devcluster import dra, process
from paralleljob.devcluster.hostcheck import CNI_BIN_DIR
from paralleljob.devcluster.nodeimages import PAUSE_IMAGE
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.realnode import RealNode, in_node, node_log
from paralleljob.devcluster.state import ProcessRecord

PLUGIN_ROLE = "paralleljob-dev-cluster-dra-plugin"
# Kept in step with fakedra's registrarSocket; a unix socket's path holds at most 107 bytes.
REGISTRAR_SOCKET = "gpu-reg.sock"
MAX_SOCKET_PATH = 107


def registrar_dir(node: RealNode) -> Path:
    """Where the kubelet (``--root-dir`` is the node's ``kubelet/``) looks for plugins' registration sockets."""
    return node.directory / "kubelet" / "plugins_registry"


def plugin_dir(node: RealNode) -> Path:
    return node.directory / "dra"


def cdi_dir(node: RealNode) -> Path:
    return node.directory / "cdi"


def check_socket_paths(node: RealNode) -> None:
    """Refuse, saying why, a run directory so deep that the kubelet could not dial the plugin's sockets."""
    for socket in (registrar_dir(node) / REGISTRAR_SOCKET, plugin_dir(node) / "dra.sock"):
        if len(str(socket).encode()) > MAX_SOCKET_PATH:
            raise RuntimeError(
                f"{socket} is longer than a unix socket path may be ({MAX_SOCKET_PATH} bytes): use a shorter"
                " cluster name or PARALLELJOB_CACHE"
            )


def device_list(shape: NodeShape, node: str, gpus: int) -> list[dict[str, Any]]:
    """The node's devices as the kwok nodes' slices list theirs (``dra.gpu_device``), ``gpu-0`` first."""
    sized = replace(shape, gpus_per_node=gpus)
    return [dra.gpu_device(sized, node, minor) for minor in range(gpus)]


def write_configs(node: RealNode, shape: NodeShape, gpus: int, shim: Path) -> None:
    """containerd 2.x's configuration (replacing realnode's 1.6 one) and the plugin's device list."""
    check_socket_paths(node)
    for folder in (cdi_dir(node), plugin_dir(node), registrar_dir(node)):
        folder.mkdir(parents=True, exist_ok=True)
    (node.directory / "containerd.toml").write_text(containerd_toml(node, shim))
    (node.directory / "devices.json").write_text(json.dumps(device_list(shape, node.name, gpus), indent=2))


def containerd_toml(node: RealNode, shim: Path) -> str:
    """Version 3 of the configuration: the same choices as realnode's for 1.6, plus the node's CDI folder and
    the runc shim of the same build (Debian's 1.6 shim may be on PATH too). NRI is off: every node's
    containerd would listen on the one host path /var/run/nri/nri.sock."""
    d = node.directory
    images, runtime = 'plugins."io.containerd.cri.v1.images"', 'plugins."io.containerd.cri.v1.runtime"'
    return f"""version = 3
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri"]
[grpc]
  address = "{node.containerd_socket}"
[ttrpc]
  address = "{d}/containerd.ttrpc.sock"
[{images}]
  snapshotter = "overlayfs"
[{images}.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[{runtime}]
  # Root here may lack CAP_SYS_RESOURCE: never ask for an oom_score_adj below the runtime's own.
  restrict_oom_score_adj = true
  # Pod sandboxes' network namespaces under the state folder (in the node's mount namespace), not /run/netns.
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ["{cdi_dir(node)}"]
[{runtime}.containerd]
  default_runtime_name = "runc"
[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  runtime_path = "{shim}"
[{runtime}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "runc"
  Root = "{d}/runc"
[{runtime}.cni]
  bin_dirs = ["{CNI_BIN_DIR}"]
  conf_dir = "{d}/cni/net.d"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def start_containerd(
    node: RealNode, holder: ProcessRecord, binaries: dict[str, Path], die_with_parent: bool
) -> ProcessRecord:
    argv = [str(binaries["containerd"]), "--config", str(node.directory / "containerd.toml")]
    return process.spawn(
        f"{node.name}-containerd", in_node(node, holder, argv), node_log(node, "containerd"),
        die_with_parent=die_with_parent,
    )  # fmt: skip


def start_plugin(node: RealNode, holder: ProcessRecord, fakedra: Path, die_with_parent: bool) -> ProcessRecord:
    argv = [
        str(fakedra), f"--node-name={node.name}", f"--kubeconfig={node.directory / 'kubelet.kubeconfig'}",
        f"--devices={node.directory / 'devices.json'}", f"--registrar-dir={registrar_dir(node)}",
        f"--plugin-dir={plugin_dir(node)}", f"--cdi-dir={cdi_dir(node)}",
    ]  # fmt: skip
    return process.spawn(
        f"{node.name}-fakedra", in_node(node, holder, argv), node_log(node, "fakedra"), die_with_parent=die_with_parent
    )


async def bind_plugin_role(kubeconfig: Path) -> None:
    """Let every node (group ``system:nodes``) publish ResourceSlices and read the claims it prepares."""
    from kubernetes_asyncio.client import RbacAuthorizationV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from paralleljob.devcluster.kubeconfig import api_client

    group = dra.RESOURCE_GROUP
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": PLUGIN_ROLE},
        "rules": [
            {"apiGroups": [group], "resources": ["resourceslices"], "verbs": ["get", "list", "watch", "create",
             "update", "patch", "delete", "deletecollection"]},
            {"apiGroups": [group], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        ],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": PLUGIN_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PLUGIN_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }
    async with api_client(kubeconfig) as api:
        rbac: Any = RbacAuthorizationV1Api(api)  # Any: dict bodies are accepted
        for create, item in ((rbac.create_cluster_role, role), (rbac.create_cluster_role_binding, binding)):
            try:
                await create(item)
            except ApiException as exc:
                if exc.status != 409:
                    raise


async def wait_for_slices(kubeconfig: Path, names: list[str], gpus: int, timeout_s: float = 120.0) -> None:
    """Until each node's plugin has published its pool with all ``gpus`` devices."""
    from kubernetes_asyncio.client import CustomObjectsApi

    from paralleljob.devcluster.kubeconfig import api_client

    deadline = time.monotonic() + timeout_s
    async with api_client(kubeconfig) as api:
        while True:
            listed = await CustomObjectsApi(api).list_cluster_custom_object(
                dra.RESOURCE_GROUP, dra.RESOURCE_VERSION, "resourceslices"
            )
            counts: dict[str, int] = {}
            for item in listed["items"]:
                spec = item["spec"]
                if spec.get("driver") == dra.DRIVER and spec.get("nodeName") in names:
                    counts[spec["nodeName"]] = counts.get(spec["nodeName"], 0) + len(spec.get("devices") or [])
            missing = sorted(name for name in names if counts.get(name) != gpus)
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no ResourceSlice with {gpus} GPUs after {timeout_s:.0f} s for {missing}")
            await asyncio.sleep(0.5)

"""One real node: its files, containerd, kubelet, fake GPU device plugin and API-server relay, and cleanup.

Every process of a node runs in the node's network namespace, in a mount namespace of the node's (see
``start_relay``: the kubelet's volume mounts are seen by containerd, never by the host, and vanish with the
node's last process) and in a cgroup of its own,
``pj-<cluster>-<node>-daemons`` (pids hierarchy), so that ``cleanup`` finds containerd's shims and every
container through the cgroups, never by process name. The kubelet's ``cgroupRoot`` is
``/pj-<cluster>-<node>``: two kubelets on one host never share ``kubepods``.

Files live in ``<run dir>/nodes/<node>/`` (kubelet root dir, containerd root and state, runc root, CNI
configuration and leases, pod logs); the few host paths that cannot be moved (``/var/log/containers``
symlinks, ``/var/lib/cni/results``, shim sockets in ``/run/containerd/s``, the empty mount point
``/var/lib/kubelet/device-plugins``) are cleaned by :mod:`paralleljob.devcluster.realnodes` on ``down``.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from paralleljob.devcluster import process
from paralleljob.devcluster.certs import real_node_name
from paralleljob.devcluster.hostcheck import CNI_BIN_DIR
from paralleljob.devcluster.kubeconfig import write_kubeconfig
from paralleljob.devcluster.nodeimages import PAUSE_IMAGE
from paralleljob.devcluster.nodenet import APISERVER_RELAY_PORT, DNS_SERVICE_IP, NodeNet, cni_config
from paralleljob.devcluster.state import ProcessRecord

CGROUP_MOUNT = Path("/sys/fs/cgroup")
REAL_NODE_LABEL = "paralleljob.dev/real-node"
# Hard-coded in the kubelet (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), whatever its --root-dir.
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


@dataclass(frozen=True)
class RealNode:
    net: NodeNet
    directory: Path

    @property
    def name(self) -> str:
        return self.net.name

    @property
    def containerd_socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def cgroup_root(self) -> str:
        return f"pj-{self.net.cluster}-{self.name}"

    @property
    def daemons_cgroup(self) -> str:
        return f"{self.cgroup_root}-daemons"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "pod-logs"


def node_objects(cluster: str, run_dir: Path, count: int) -> list[RealNode]:
    return [
        RealNode(NodeNet(cluster, real_node_name(i), i), run_dir / "nodes" / real_node_name(i)) for i in range(count)
    ]


def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones, the unified one)."""
    if (CGROUP_MOUNT / "cgroup.procs").is_file():
        return [CGROUP_MOUNT]
    return sorted(path for path in CGROUP_MOUNT.iterdir() if (path / "cgroup.procs").is_file())


def _pids_hierarchy() -> Path:
    pids = CGROUP_MOUNT / "pids"
    return pids if pids.is_dir() else CGROUP_MOUNT


def make_cgroups(node: RealNode) -> None:
    """The kubelet's cgroup root in every hierarchy (it checks they exist), and the daemons' cgroup."""
    for hierarchy in hierarchies():
        root = hierarchy / node.cgroup_root
        root.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset cgroup starts empty: nothing could join it
            if (root / knob).is_file() and not (root / knob).read_text().strip():
                (root / knob).write_text((hierarchy / knob).read_text())
    (_pids_hierarchy() / node.daemons_cgroup).mkdir(exist_ok=True)


def cgroup_dirs(node: RealNode) -> list[Path]:
    """The node's cgroup folders, deepest first (the order they can be removed in)."""
    found: list[Path] = []
    for hierarchy in hierarchies():
        for top in (hierarchy / node.cgroup_root, hierarchy / node.daemons_cgroup):
            if top.is_dir():
                found += [Path(path) for path, _, _ in os.walk(top)]
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def node_pids(node: RealNode) -> set[int]:
    pids: set[int] = set()
    hierarchy = _pids_hierarchy()
    for top in (hierarchy / node.cgroup_root, hierarchy / node.daemons_cgroup):
        for path, _, files in os.walk(top) if top.is_dir() else []:
            if "cgroup.procs" in files:
                pids.update(int(line) for line in (Path(path) / "cgroup.procs").read_text().split())
    return pids


def write_configs(
    node: RealNode, server_ca: Path, token: str, gpus: int, labels: dict[str, str], coredns_token: str
) -> None:
    for folder in ("cni/net.d", "cni/ipam", "kubelet", "containerd/root", "containerd/state", "runc", "pod-logs"):
        (node.directory / folder).mkdir(parents=True, exist_ok=True)
    (node.directory / "cni/net.d/10-pj.conflist").write_text(
        json.dumps(cni_config(node.net, node.directory / "cni/ipam"), indent=2)
    )
    (node.directory / "containerd.toml").write_text(_containerd_toml(node))
    write_kubeconfig(
        node.directory / "kubelet.kubeconfig", f"https://127.0.0.1:{APISERVER_RELAY_PORT}", server_ca, token,
        f"paralleljob-{node.net.cluster}", user=f"system:node:{node.name}",
    )  # fmt: skip
    write_kubeconfig(
        node.directory / "coredns.kubeconfig", f"https://127.0.0.1:{APISERVER_RELAY_PORT}", server_ca,
        coredns_token, "coredns", user="coredns",
    )  # fmt: skip
    (node.directory / "Corefile").write_text(_corefile(node))
    (node.directory / "kubelet.yaml").write_text(json.dumps(_kubelet_config(node), indent=2))
    (node.directory / "labels").write_text(",".join(f"{key}={value}" for key, value in sorted(labels.items())))
    (node.directory / "gpus").write_text(str(gpus))


# containerd's root (content store, unpacked snapshots, metadata) lives on a tmpfs: a node holding the worker
# and operator images has some 24,000 files there, whose deletion on disk took 33 s of `down` (measured).
CONTAINERD_ROOT_TMPFS = "size=4g,mode=0700"


def mount_containerd_root(node: RealNode) -> None:
    """A tmpfs for containerd's root, mounted on the host before the node's mount namespace is made (so the
    namespace has it); ``nodecleanup`` unmounts everything under the run directory on ``down``."""
    root = node.directory / "containerd/root"
    root.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(root):
        subprocess.run(["mount", "-t", "tmpfs", "-o", CONTAINERD_ROOT_TMPFS, "tmpfs", str(root)], check=True)


def _containerd_toml(node: RealNode) -> str:
    d = node.directory
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{node.containerd_socket}"
[ttrpc]
  address = "{d}/containerd.ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # Root here may lack CAP_SYS_RESOURCE: never ask for an oom_score_adj below the runtime's own.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Pod sandboxes' network namespaces under the state folder (in the node's mount namespace), not /run/netns.
  netns_mounts_under_state_dir = true
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "runc"
  Root = "{d}/runc"
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{d}/cni/net.d"
"""


def _corefile(node: RealNode) -> str:
    """Cluster names only (nothing is forwarded: no traffic leaves the cluster's namespaces)."""
    return f"""cluster.local:53 in-addr.arpa:53 {{
    bind {node.net.node_ip}
    errors
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {node.directory / "coredns.kubeconfig"} coredns
        pods insecure
    }}
    cache 5
}}
"""


def start_coredns(node: RealNode, holder: ProcessRecord, coredns: Path, die_with_parent: bool) -> ProcessRecord:
    argv = [str(coredns), "-conf", str(node.directory / "Corefile")]
    return process.spawn(
        f"{node.name}-coredns", in_node(node, holder, argv), node_log(node, "coredns"), die_with_parent=die_with_parent
    )


def _kubelet_config(node: RealNode) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},  # its port is reachable only inside the cluster's namespaces
        "cgroupDriver": "cgroupfs",  # no systemd here
        "cgroupRoot": f"/{node.cgroup_root}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "oomScoreAdj": 0,  # as restrict_oom_score_adj: no CAP_SYS_RESOURCE needed
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "podLogsDir": str(node.pod_logs),
        "podCIDR": node.net.pod_cidr,
        "resolvConf": "",
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": "cluster.local",
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "registerNode": True,
        "serializeImagePulls": False,
        # Every image is loaded by hand (nothing can be pulled again): never garbage-collect one.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # The root device's filesystem stats cannot be read here; evict on memory only.
        "evictionHard": {"memory.available": "100Mi"},
        "localStorageCapacityIsolation": False,
        "nodeStatusReportFrequency": "10s",
    }


def _in_cgroup(node: RealNode, argv: list[str]) -> list[str]:
    procs = _pids_hierarchy() / node.daemons_cgroup / "cgroup.procs"
    return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *argv]


def in_node(node: RealNode, holder: ProcessRecord, argv: list[str]) -> list[str]:
    """Join the daemons' cgroup, the node's mount namespace (the relay's) and network namespace, run argv."""
    return _in_cgroup(
        node, ["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", f"--net={node.net.netns_path}", "--", *argv]
    )


def start_relay(node: RealNode, apiserver_socket: Path, die_with_parent: bool) -> ProcessRecord:
    """The API server at 127.0.0.1:6443 of the node (and, through a DNAT rule, at the Service IP).

    It also creates and holds the node's mount namespace, which the node's other processes join: a slave
    of the host's (host mounts show up inside, the node's stay inside and vanish with it), where the
    kubelet's hard-coded device-plugin folder /var/lib/kubelet/device-plugins is the node's own, so two
    kubelets on one host do not share a registration socket."""
    plugins = node.directory / "device-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)  # the mount point (an empty folder on the host)
    relay = ["socat", f"TCP-LISTEN:{APISERVER_RELAY_PORT},fork,reuseaddr", f"UNIX-CONNECT:{apiserver_socket}"]
    argv = [
        "unshare", "--mount", "--propagation", "slave", "nsenter", f"--net={node.net.netns_path}", "--",
        "sh", "-c", 'mount --bind "$0" "$1" && shift && exec "$@"', str(plugins), str(DEVICE_PLUGIN_DIR), *relay,
    ]  # fmt: skip
    return process.spawn(
        f"{node.name}-relay", _in_cgroup(node, argv), node_log(node, "relay"), die_with_parent=die_with_parent
    )


def start_containerd(node: RealNode, holder: ProcessRecord, die_with_parent: bool) -> ProcessRecord:
    argv = ["containerd", "--config", str(node.directory / "containerd.toml")]
    return process.spawn(
        f"{node.name}-containerd",
        in_node(node, holder, argv),
        node_log(node, "containerd"),
        die_with_parent=die_with_parent,
    )


def start_kubelet(node: RealNode, holder: ProcessRecord, kubelet: Path, die_with_parent: bool) -> ProcessRecord:
    d = node.directory
    argv = [
        str(kubelet),
        f"--config={d / 'kubelet.yaml'}",
        f"--kubeconfig={d / 'kubelet.kubeconfig'}",
        f"--root-dir={d / 'kubelet'}",
        f"--cert-dir={d / 'kubelet/pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.net.node_ip}",
        f"--node-labels={(d / 'labels').read_text()}",
        "--v=1",
    ]
    return process.spawn(
        f"{node.name}-kubelet", in_node(node, holder, argv), node_log(node, "kubelet"), die_with_parent=die_with_parent
    )


def start_device_plugin(node: RealNode, holder: ProcessRecord, fakegpu: Path, die_with_parent: bool) -> ProcessRecord:
    argv = [str(fakegpu), f"--plugin-dir={DEVICE_PLUGIN_DIR}", f"--count={(node.directory / 'gpus').read_text()}"]
    return process.spawn(
        f"{node.name}-fakegpu", in_node(node, holder, argv), node_log(node, "fakegpu"), die_with_parent=die_with_parent
    )


def node_log(node: RealNode, what: str) -> Path:
    return node.directory.parent.parent / "logs" / f"{node.name}-{what}.log"

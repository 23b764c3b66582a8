"""Remove every trace of a cluster's real nodes (``down``), safe on a half-started cluster and when repeated.

``cleanup`` kills whatever is left in the nodes' cgroups (containers, shims), unmounts anything under the
run directory, removes the cgroups, the pod sandboxes' and the nodes' network namespaces (their
interfaces, routes and iptables rules go with them) and the host files the kubelet, containerd and the CNI
plugins wrote outside the run directory. ``remember_host_paths`` (called by ``up``) notes which of those
host folders did not exist yet, so that ``cleanup`` removes exactly the ones it created.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from paralleljob.devcluster import nodenet, realnode
from paralleljob.devcluster.realnode import RealNode, node_objects

# Host paths the kubelet, containerd and the CNI plugins write whatever they are told; removed on cleanup
# when `start` created them (and they are empty by then).
HOST_PATHS = (
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/lib/cni/results"),
    Path("/var/lib/cni"),
    Path("/run/containerd/s"),
    Path("/run/containerd"),
)


def remember_host_paths(run_dir: Path) -> None:
    created = [str(path) for path in HOST_PATHS if not path.exists()]
    (run_dir / "host-paths-created.json").write_text(json.dumps(created))


def cleanup(cluster: str, run_dir: Path) -> None:
    """Remove every trace of the cluster's real nodes (see the module docstring)."""
    count_file = run_dir / "real-nodes"
    if not count_file.is_file():
        return
    nodes = node_objects(cluster, run_dir, int(count_file.read_text()))
    sandboxes = _sandbox_netns_inodes(nodes)
    for node in nodes:
        _kill_cgroup_members(node)
    _unmount_under(run_dir)
    _remove_sandbox_netns(sandboxes)
    for node in nodes:
        for folder in realnode.cgroup_dirs(node):
            with contextlib.suppress(OSError):
                folder.rmdir()
    nodenet.teardown(cluster, [node.net for node in nodes])
    _remove_host_files(cluster, run_dir, nodes)


def _sandbox_netns_inodes(nodes: list[RealNode]) -> set[int]:
    own = {os.stat(node.net.netns_path).st_ino for node in nodes if node.net.netns_path.exists()}
    inodes = set()
    for node in nodes:
        for pid in realnode.node_pids(node):
            with contextlib.suppress(OSError):
                inodes.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    return inodes - own - {os.stat("/proc/self/ns/net").st_ino}


def _kill_cgroup_members(node: RealNode, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (pids := realnode.node_pids(node)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        raw = line.split()[4]
        points.append(raw.encode().decode("unicode_escape"))  # \040 and friends in mountinfo
    return points


def _unmount_under(folder: Path) -> None:
    prefix = str(folder.resolve()) + "/"
    for point in sorted((p for p in _mount_points() if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _remove_sandbox_netns(inodes: set[int]) -> None:
    for entry in nodenet.NETNS_DIR.glob("cni-*") if nodenet.NETNS_DIR.is_dir() else []:
        try:
            if entry.stat().st_ino in inodes:
                subprocess.run(["umount", "-l", str(entry)], capture_output=True, check=False)
                entry.unlink()
        except OSError:
            pass


def _remove_host_files(cluster: str, run_dir: Path, nodes: list[RealNode]) -> None:
    logs = tuple(str(node.pod_logs) for node in nodes)
    for link in Path("/var/log/containers").glob("*.log") if Path("/var/log/containers").is_dir() else []:
        if link.is_symlink() and os.readlink(link).startswith(logs):
            link.unlink()
    # libcni caches a result per network and sandbox: <network>-<sandbox id>-<interface>. Our bridge network
    # is named pj-<cluster>; containerd's built-in loopback network is shared, so go by our sandboxes' ids.
    sandboxes = {
        entry.name
        for node in nodes
        for entry in (node.directory / "containerd/root/io.containerd.grpc.v1.cri/sandboxes").glob("*")
    }
    results = Path("/var/lib/cni/results")
    for result in results.iterdir() if results.is_dir() else []:
        if result.name.startswith(f"pj-{cluster}-") or any(f"-{sandbox}-" in result.name for sandbox in sandboxes):
            result.unlink()
    listening = {
        line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:] if len(line.split()) > 7
    }
    shims = Path("/run/containerd/s")
    for stale in shims.iterdir() if shims.is_dir() else []:
        if str(stale) not in listening:  # a dead shim's socket (ours were all killed above)
            stale.unlink(missing_ok=True)
    created = run_dir / "host-paths-created.json"
    for path in json.loads(created.read_text()) if created.is_file() else []:
        with contextlib.suppress(OSError):
            Path(path).rmdir()

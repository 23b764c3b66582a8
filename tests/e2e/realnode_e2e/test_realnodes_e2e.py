"""Real nodes: kubelets that register with their own credentials, a device plugin whose choice the
container sees, and pods with real IPs that reach each other across nodes over TCP."""

from __future__ import annotations

import time
from typing import Any

import pytest
from realhelpers import RealCluster, pod_log

from paralleljob.devcluster.session import KubeSession


def _pod(name: str, node: str, image: str, command: list[str], gpus: int = 0) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "Never", "command": command,
                 "resources": {"limits": limits}},
            ],
        },
    }  # fmt: skip


def wait_phase(kube: KubeSession, namespace: str, name: str, phases: set[str], timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        pod = kube.run(kube.core.read_namespaced_pod(name, namespace))
        if pod.status.phase in phases:
            return pod
        assert time.monotonic() < deadline, f"pod {name} is {pod.status.phase}, not {phases}: {pod.status}"
        time.sleep(0.3)


def test_real_nodes_register_as_themselves_with_gpus(real_kube: KubeSession) -> None:
    nodes = {n.metadata.name: n for n in real_kube.run(real_kube.core.list_node()).items}
    for name in ("real-node-0", "real-node-1"):
        node = nodes[name]
        assert node.status.node_info.container_runtime_version.startswith("containerd://")
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert node.metadata.labels["paralleljob.dev/real-node"] == "true"
    addresses = {name: {a.address for a in nodes[name].status.addresses if a.type == "InternalIP"} for name in nodes}
    assert addresses["real-node-0"] == {"10.250.0.10"} and addresses["real-node-1"] == {"10.250.0.11"}
    # The node's lease is renewed by the kubelet itself, under its own identity.
    from kubernetes_asyncio.client import CoordinationV1Api

    lease = real_kube.run(CoordinationV1Api(real_kube.api).read_namespaced_lease("real-node-0", "kube-node-lease"))
    assert lease.spec.holder_identity == "real-node-0"


def test_pods_on_two_nodes_talk_over_tcp_and_see_their_gpus(
    real_cluster: RealCluster, real_kube: KubeSession, real_namespace: str
) -> None:
    image = real_cluster.worker_image
    server = (
        "import os,socket; s=socket.create_server(('',7000)); c,_=s.accept();"
        " c.sendall(('hello from '+os.environ['PARALLELJOB_FAKE_GPU_IDS']).encode()); c.close()"
    )
    real_kube.run(real_kube.core.create_namespaced_pod(
        real_namespace, _pod("server", "real-node-0", image, ["python3", "-c", server], gpus=2)
    ))  # fmt: skip
    running = wait_phase(real_kube, real_namespace, "server", {"Running"})
    server_ip = running.status.pod_ip
    assert server_ip.startswith("10.245.0.")
    client = (
        "import socket,sys,time\n"
        "for _ in range(100):\n"
        "    try: c=socket.create_connection((sys.argv[1],7000),timeout=2); break\n"
        "    except OSError: time.sleep(0.2)\n"
        "print(c.recv(100).decode(), flush=True)"
    )
    real_kube.run(real_kube.core.create_namespaced_pod(
        real_namespace, _pod("client", "real-node-1", image, ["python3", "-c", client, server_ip])
    ))  # fmt: skip
    done = wait_phase(real_kube, real_namespace, "client", {"Succeeded", "Failed"})
    assert done.status.phase == "Succeeded", pod_log(real_cluster.cluster, real_namespace, "client", "main")
    assert done.status.pod_ip.startswith("10.245.1.")
    said = pod_log(real_cluster.cluster, real_namespace, "client", "main")
    # The two device ids the kubelet chose reached the server's environment through our plugin's Allocate.
    ids = said.split("hello from ")[1].split()[0].split(",")
    assert len(set(ids)) == 2 and all(i.startswith("gpu-") for i in ids), said


CONTAINERD_2_DEFAULTS = ("/var/run/nri", "/etc/cdi", "/var/run/cdi", "/var/lib/containerd")


def _host_traces() -> dict[str, object]:
    """What a real node could leave on the host: namespaces, cgroups, mounts, files, iptables rules."""
    import subprocess
    from pathlib import Path

    from paralleljob.devcluster.nodecleanup import HOST_PATHS
    from paralleljob.devcluster.realnode import hierarchies

    netns = Path("/run/netns")
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    return {
        "netns": sorted(p.name for p in netns.iterdir()) if netns.is_dir() else [],
        "cgroups": sorted(str(p) for h in hierarchies() for p in h.iterdir() if p.name.startswith("pj-")),
        "mounts": sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()),
        # and where containerd 2.x (DRA nodes) would write by default: NRI's socket, CDI specs, its root
        "paths": {str(p): Path(p).exists() for p in (*HOST_PATHS, *CONTAINERD_2_DEFAULTS)},
        "iptables": [line.split(" [")[0] for line in rules.splitlines() if not line.startswith("#")],
    }


@pytest.mark.parametrize("gpu_api", ["device-plugin", "dra"])  # dra: containerd 2.x and the DRA plugin
def test_down_leaves_nothing_behind(tmp_path: object, gpu_api: str) -> None:
    import os

    from realhelpers import skip_unless_real_nodes_can_run

    from paralleljob.devcluster import process
    from paralleljob.devcluster.cluster import down, up
    from paralleljob.devcluster.nodeimages import PAUSE_IMAGE
    from paralleljob.devcluster.nodes import NodeShape
    from paralleljob.devcluster.state import load

    skip_unless_real_nodes_can_run()
    before = _host_traces()
    name = f"e2e-down-{os.getpid()}"
    shape = NodeShape(count=1, gpu_api=gpu_api)
    cluster = up(name, shape, report=lambda _: None, die_with_caller=True, real_nodes=1, real_node_gpus=2)
    try:
        record = load(name)
        assert record is not None
        kube = KubeSession(cluster.kubeconfig)
        try:
            gpus = 1 if gpu_api == "device-plugin" else 0  # a DRA node has no nvidia.com/gpu
            pod = _pod("p", "real-node-0", PAUSE_IMAGE, ["/pause"], gpus)
            kube.run(kube.core.create_namespaced_pod("default", pod))
            wait_phase(kube, "default", "p", {"Running"})
        finally:
            kube.close()
        during = _host_traces()
        assert during != before  # the check below can tell a running node from a clean host
    finally:
        down(name, report=lambda _: None)
    assert not [p.name for p in record.processes if process.is_alive(p)]
    assert _host_traces() == before

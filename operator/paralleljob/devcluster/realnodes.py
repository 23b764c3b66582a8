"""Real (kubelet) nodes beside the kwok nodes: ``dev-cluster up --real-nodes N`` and their full cleanup.

``start`` checks the host (:mod:`~paralleljob.devcluster.hostcheck`), builds or finds the kubelet, device
plugin and pause binaries, wires the namespaces (:mod:`~paralleljob.devcluster.nodenet`), starts a relay
from a unix socket in the run directory to the API server (a kubelet in its own network namespace cannot
reach the host's 127.0.0.1), then per node containerd (with the pause image loaded), the kubelet (as
``system:node:<name>``, its own token, with the ``system:node`` ClusterRole bound to ``system:nodes``)
and the fake GPU device plugin, and waits until every node is Ready with its GPUs allocatable and holds
its Lease. With ``dra`` (a cluster whose GPUs are DRA devices) each node runs containerd 2.x and our DRA
kubelet plugin instead (:mod:`~paralleljob.devcluster.dranode`), and ``start`` waits for its ResourceSlice.

:mod:`~paralleljob.devcluster.nodecleanup` undoes all of it on ``down``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paralleljob.devcluster import dranode, hostcheck, nodecleanup, nodenet, process, realnode
from paralleljob.devcluster.build import ensure_dra_node_binaries, ensure_node_binaries
from paralleljob.devcluster.certs import COREDNS_USER, MAX_REAL_NODES, Pki
from paralleljob.devcluster.nodeimages import import_archive, write_pause_archive
from paralleljob.devcluster.nodes import DEV_CLUSTER_LABEL, GPU_RESOURCE, NodeShape
from paralleljob.devcluster.realnode import REAL_NODE_LABEL, node_objects
from paralleljob.devcluster.state import ProcessRecord

Report = Callable[[str], None]
Remember = Callable[[ProcessRecord], None]

NODE_BINDING = "paralleljob-dev-cluster-nodes"
NODE_LEASE_NAMESPACE = "kube-node-lease"
# Controllers a cluster with kubelets needs beyond the kwok-only allowlist (the flag appends to it):
# EndpointSlices give CoreDNS the headless Services' pod names; the node lifecycle controller turns a node
# whose kubelet stopped renewing its lease NotReady (after the grace period) and taints it.
CONTROLLER_MANAGER_ARGS = (
    "--controllers=endpointslice-controller,node-lifecycle-controller,serviceaccount-controller,"
    "root-ca-certificate-publisher-controller,deployment-controller,replicaset-controller,daemonset-controller",
    "--node-monitor-grace-period=20s",
)


class RealNodesUnavailable(RuntimeError):
    """The machine cannot run real nodes; the message says what is missing."""


def labels(shape: NodeShape, gpus: int) -> dict[str, str]:
    """GPU Feature Discovery and topology labels, as on the kwok nodes; real nodes share one rack."""
    return {
        DEV_CLUSTER_LABEL: "true",
        REAL_NODE_LABEL: "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": shape.gpu_product,
        "nvidia.com/gpu.memory": str(shape.gpu_memory_mib),
        "nvidia.com/gpu.count": str(gpus),
        "network.topology.nvidia.com/leaf": "real-leaf-00",
        "network.topology.nvidia.com/spine": "real-spine-00",
        "topology.kubernetes.io/zone": "real-zone",
    }


def start(
    cluster: str, run_dir: Path, pki: Pki, api_port: int, kubeconfig: Path, count: int, gpus: int,
    shape: NodeShape, remember: Remember, report: Report, die_with_parent: bool, own_scheduler: bool = True,
    dra: bool = False,
) -> list[str]:  # fmt: skip
    """``dra``: GPUs as DRA devices of our kubelet plugin, through containerd 2.x (:mod:`dranode`), not the
    device plugin's allocatable ``nvidia.com/gpu``."""
    if count > MAX_REAL_NODES:
        raise ValueError(f"at most {MAX_REAL_NODES} real nodes (one kubelet token each is made at start)")
    problems = hostcheck.missing()
    if problems:
        raise RealNodesUnavailable("real nodes cannot run on this machine: " + "; ".join(problems))
    binaries = ensure_node_binaries(report)
    dra_binaries = ensure_dra_node_binaries(report) if dra else {}
    started = time.monotonic()
    nodecleanup.remember_host_paths(run_dir)
    nodes = node_objects(cluster, run_dir, count)
    (run_dir / "real-nodes").write_text(str(count))  # read by cleanup, even if `up` dies right after this
    nodenet.setup([node.net for node in nodes])
    socket = run_dir / "apiserver.sock"
    argv = ["socat", f"UNIX-LISTEN:{socket},fork,unlink-early,mode=600", f"TCP:127.0.0.1:{api_port}"]
    remember(
        process.spawn("apiserver-relay", argv, run_dir / "logs/apiserver-relay.log", die_with_parent=die_with_parent)
    )
    if own_scheduler:  # else the cluster's gang-gated kube-scheduler places their pods (never two schedulers)
        port = process.free_loopback_ports(1)[0]
        scheduler = [
            str(binaries["kube-scheduler"]), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--v=1",
        ]  # fmt: skip
        remember(
            process.spawn(
                "kube-scheduler", scheduler, run_dir / "logs/kube-scheduler.log", die_with_parent=die_with_parent
            )
        )
    pause = write_pause_archive(binaries["pause"], run_dir / "images" / "pause.tar")
    asyncio.run(_bind_node_role(kubeconfig))
    if dra:
        asyncio.run(dranode.bind_plugin_role(kubeconfig))
    for node in nodes:
        realnode.write_configs(
            node, pki.ca_cert, pki.node_tokens[node.name], gpus, labels(shape, gpus), pki.coredns_token
        )
        if dra:
            dranode.write_configs(node, shape, gpus, dra_binaries["containerd-shim-runc-v2"])
        realnode.make_cgroups(node)
        realnode.mount_containerd_root(node)
        holder = realnode.start_relay(node, socket, die_with_parent)
        remember(holder)
        _wait_for(lambda holder=holder: _has_own_mount_ns(holder.pid), holder, 10)  # type: ignore[misc]
        if dra:
            containerd = dranode.start_containerd(node, holder, dra_binaries, die_with_parent)
        else:
            containerd = realnode.start_containerd(node, holder, die_with_parent)
        remember(containerd)
        _wait_for(lambda node=node: node.containerd_socket.exists(), containerd, 30)  # type: ignore[misc]
        import_archive(node.containerd_socket, pause)
        remember(realnode.start_kubelet(node, holder, binaries["kubelet"], die_with_parent))
        if dra:
            remember(dranode.start_plugin(node, holder, dra_binaries["fakedra"], die_with_parent))
        else:
            remember(realnode.start_device_plugin(node, holder, binaries["fakegpu"], die_with_parent))
        remember(realnode.start_coredns(node, holder, binaries["coredns"], die_with_parent))
    names = [node.name for node in nodes]
    if dra:  # no allocatable GPUs: Ready and holding its lease, and its pool published
        asyncio.run(wait_ready_with_gpus(kubeconfig, names, 0))
        asyncio.run(dranode.wait_for_slices(kubeconfig, names, gpus))
    else:
        asyncio.run(wait_ready_with_gpus(kubeconfig, names, gpus))
    kind = "DRA devices" if dra else "GPUs"
    report(f"{count} real node(s) Ready with {gpus} fake {kind} each ({time.monotonic() - started:.1f} s)")
    return names


def _has_own_mount_ns(pid: int) -> bool:
    """True once the relay has its mount namespace and the device-plugin bind mount (it then runs socat)."""
    try:
        own = os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        return own and Path(f"/proc/{pid}/comm").read_text().strip() == "socat"
    except OSError:
        return False


def _wait_for(check: Callable[[], bool], record: ProcessRecord, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if not process.is_alive(record) or time.monotonic() > deadline:
            raise RuntimeError(f"{record.name} did not start; last lines of {record.log}:\n{process.tail(record.log)}")
        time.sleep(0.1)


async def _bind_node_role(kubeconfig: Path) -> None:
    """Kubelets act as system:node:<name> in system:nodes; the API server here authorizes with RBAC alone,
    so the bootstrap ClusterRole system:node is bound to that group (what the Node authorizer would allow,
    but for every node)."""
    from kubernetes_asyncio.client import RbacAuthorizationV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from paralleljob.devcluster.kubeconfig import api_client

    body = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NODE_BINDING},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }
    dns_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": COREDNS_USER},
        "rules": [
            {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }
    dns_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": COREDNS_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}],
    }
    async with api_client(kubeconfig) as api:
        rbac: Any = RbacAuthorizationV1Api(api)  # Any: dict bodies are accepted
        for create, item in (
            (rbac.create_cluster_role_binding, body),
            (rbac.create_cluster_role, dns_role),
            (rbac.create_cluster_role_binding, dns_binding),
        ):
            try:
                await create(item)
            except ApiException as exc:
                if exc.status != 409:
                    raise


async def wait_ready_with_gpus(kubeconfig: Path, names: list[str], gpus: int, timeout_s: float = 120.0) -> None:
    """Until every node is joined: Ready, its GPUs allocatable (the device plugin registered after the
    node's first status when it came up late, or again after a restarted kubelet, which reports 0 until
    then) and its Lease in ``kube-node-lease`` held by itself (the kubelet creates it only once the Node
    exists, retrying with a backoff of up to 7 s, so a node can be Ready before its Lease is there)."""
    from kubernetes_asyncio.client import CoordinationV1Api, CoreV1Api

    from paralleljob.devcluster.kubeconfig import api_client
    from paralleljob.devcluster.nodes import is_ready

    deadline = time.monotonic() + timeout_s
    async with api_client(kubeconfig) as api:
        while True:
            listed = await CoreV1Api(api).list_node(label_selector=f"{REAL_NODE_LABEL}=true")
            leases = await CoordinationV1Api(api).list_namespaced_lease(NODE_LEASE_NAMESPACE)
            held = {lease.metadata.name for lease in leases.items if lease.spec.holder_identity == lease.metadata.name}
            done = {
                node.metadata.name
                for node in listed.items
                if is_ready(node)
                and int((node.status.allocatable or {}).get(GPU_RESOURCE, 0)) == gpus
                and node.metadata.name in held
            }
            if set(names) <= done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"real nodes not Ready with {gpus} GPUs and their lease after {timeout_s:.0f} s:"
                    f" {sorted(set(names) - done)}"
                )
            await asyncio.sleep(0.5)


def load_image(cluster: str, run_dir: Path, archive: Path) -> list[str]:
    """Import a docker-archive into every real node's containerd (``imagePullPolicy: Never`` finds it)."""
    count_file = run_dir / "real-nodes"
    nodes = node_objects(cluster, run_dir, int(count_file.read_text())) if count_file.is_file() else []
    for node in nodes:
        import_archive(node.containerd_socket, archive)
    return [node.name for node in nodes]


def stop_kubelet(cluster: str, node: str) -> None:
    """Stop one real node's kubelet (its containers keep running, as when a kubelet crashes)."""
    from paralleljob.devcluster import state

    record = state.load(cluster)
    assert record is not None, f"no dev cluster {cluster!r}"
    for proc in record.processes:
        if proc.name == f"{node}-kubelet":
            process.stop(proc)


def restart_kubelet(cluster: str, node: str, die_with_parent: bool = False) -> None:
    """Start a stopped kubelet again in its node's namespaces; the device plugin re-registers by itself.
    The node turns Ready before its GPUs are allocatable again: ``wait_ready_with_gpus`` waits for both."""
    from paralleljob.devcluster import state

    record = state.load(cluster)
    assert record is not None, f"no dev cluster {cluster!r}"
    index = int(node.rsplit("-", 1)[1])
    real = node_objects(cluster, Path(record.run_dir), index + 1)[index]
    holder = next(p for p in record.processes if p.name == f"{node}-relay")
    started = realnode.start_kubelet(real, holder, ensure_node_binaries()["kubelet"], die_with_parent)
    record.processes = [p for p in record.processes if p.name != started.name] + [started]
    state.save(record)

"""The real nodes' network: one network namespace per node, wired to the others, none touching the host's.

Layout of a cluster named ``c`` with nodes ``real-node-0..N-1``::

    netns pj-c-net            bridge br0 (the "switch"); veth n<i> per node attached to it
    netns pj-c-real-node-<i>  eth0 = 10.250.0.<10+i>/24 (the node IP); cni0 = the CNI bridge of its pods,
                              pod CIDR 10.245.<i>.0/24; routes to every other node's pod CIDR via that
                              node's IP (host-gateway routing); IP forwarding on (a per-namespace setting)

Every cluster has its own switch namespace, so two clusters reuse the same addresses without meeting, and
nothing is added to the host's namespace: no interface, route, sysctl or iptables rule. The only iptables
rules are inside node namespaces (they vanish with them): traffic to the ``kubernetes`` Service's cluster
IP is sent to the node's API server relay, and DNS to the cluster DNS IP to the node's CoreDNS (there is
no kube-proxy). Deleting the namespaces removes every
interface, route and rule; ``teardown`` does that and is safe to repeat.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

NODE_SUBNET_PREFIX = "10.250.0."
POD_CIDR_PREFIX = "10.245."
APISERVER_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's cluster IP (first of 10.96.0.0/12)
APISERVER_RELAY_PORT = 6443  # the relay to the API server listens on this port of every node's namespace
DNS_SERVICE_IP = "10.96.0.10"  # the kubelets' clusterDNS; each node's CoreDNS answers it on the node IP
NETNS_DIR = Path("/run/netns")


@dataclass(frozen=True)
class NodeNet:
    """Addresses and namespace of one real node."""

    cluster: str
    name: str
    index: int

    @property
    def netns(self) -> str:
        return f"pj-{self.cluster}-{self.name}"

    @property
    def node_ip(self) -> str:
        return f"{NODE_SUBNET_PREFIX}{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"{POD_CIDR_PREFIX}{self.index}.0/24"

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns


def switch_netns(cluster: str) -> str:
    return f"pj-{cluster}-net"


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")


def _in_netns(netns: str, *argv: str) -> None:
    result = subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` in {netns} failed: {result.stderr.strip()}")


def setup(nodes: list[NodeNet]) -> None:
    """Create the switch and the nodes' namespaces, wire them and route pod CIDRs between nodes."""
    if not nodes:
        return
    switch = switch_netns(nodes[0].cluster)
    _ip("netns", "add", switch)
    _ip("-n", switch, "link", "set", "lo", "up")
    _ip("-n", switch, "link", "add", "br0", "type", "bridge")
    _ip("-n", switch, "link", "set", "br0", "up")
    for node in nodes:
        _ip("netns", "add", node.netns)
        _ip("-n", node.netns, "link", "set", "lo", "up")
        port = f"n{node.index}"
        _ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
        _ip("-n", switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", node.netns, "addr", "add", f"{node.node_ip}/24", "dev", "eth0")
        _ip("-n", node.netns, "link", "set", "eth0", "up")
        _in_netns(node.netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        for chain in ("PREROUTING", "OUTPUT"):  # from pods (routed in) and from host-network processes
            _in_netns(
                node.netns, "iptables", "-t", "nat", "-A", chain, "-d", APISERVER_SERVICE_IP, "-p", "tcp",
                "--dport", "443", "-j", "DNAT", "--to-destination", f"{node.node_ip}:{APISERVER_RELAY_PORT}",
            )  # fmt: skip
            for protocol in ("udp", "tcp"):
                _in_netns(
                    node.netns, "iptables", "-t", "nat", "-A", chain, "-d", DNS_SERVICE_IP, "-p", protocol,
                    "--dport", "53", "-j", "DNAT", "--to-destination", f"{node.node_ip}:53",
                )  # fmt: skip
    for node in nodes:
        for other in nodes:
            if other is not node:
                _ip("-n", node.netns, "route", "add", other.pod_cidr, "via", other.node_ip)


def teardown(cluster: str, nodes: list[NodeNet]) -> None:
    """Delete the nodes' and the switch's namespaces (their interfaces, routes and rules go with them)."""
    for netns in [node.netns for node in nodes] + [switch_netns(cluster)]:
        if (NETNS_DIR / netns).exists():
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


def cni_config(node: NodeNet, ipam_dir: Path) -> dict[str, object]:
    """The node's CNI network: a bridge with the node's pod CIDR; the node namespace routes between nodes.
    ``ipam_dir`` keeps host-local's leases in the node's folder instead of /var/lib/cni/networks."""
    return {
        "cniVersion": "0.4.0",
        "name": f"pj-{node.cluster}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": node.pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "loopback"},
        ],
    }

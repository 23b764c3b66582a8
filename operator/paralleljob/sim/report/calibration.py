"""The collective model against published NCCL-tests runs: ``python -m paralleljob.sim.report.calibration``.

Prints docs/simulator.md's calibration table: for each published run (fabric, GPUs, message size, what was
measured, where) the bus bandwidth ``core.timing.collectives`` models, its error, and what the placer's cost model
charges for the same all-reduce today (a ring at the bandwidth of the slowest level it crosses, on the
simulator's default topologies). ``tests/sim/test_calibration.py`` holds every modelled figure within
``TOLERANCE`` of its anchor and the docs' table to this printout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.timing.collectives import (
    GB200_NVL72,
    HGX_H100,
    Fabric,
    allreduce_busbw,
    allreduce_ms,
    sendrecv_busbw,
)
from paralleljob.core.timing.evaluate import nodes_common_level
from paralleljob.core.topology import Topology

TOLERANCE = 0.20
GIB = 2**30


@dataclass(frozen=True, slots=True)
class Anchor:
    fabric: Fabric
    what: str  # the row's label
    gpus: int
    size_bytes: int
    published: tuple[float, float]  # low, high busbw (GB/s) of the published run(s) at this size
    source: str
    algorithm: str | None = None  # forced, as the run forced NCCL_ALGO / NCCL_NVLS_ENABLE=0
    per_domain: int | None = None
    sendrecv: bool = False


ANCHORS = (
    Anchor(HGX_H100, "HGX H100, 8 GPUs, NVLS off (ring)", 8, 8 * GIB, (369.0, 370.0),
           "nccl-tests#212 (NVIDIA: ~370 effective NVLink), nccl-tests#309 (368.76 with NVLS disabled)", "ring"),
    Anchor(HGX_H100, "HGX H100, 8 GPUs, NVLS (default)", 8, 8 * GIB, (476.0, 480.0),
           "nccl-tests#212 (NVIDIA: peak ~480 on 8 GPUs), nccl-tests#290 (476 measured, 'in the expected range')"),
    Anchor(HGX_H100, "2 x H100 over NVLink, one direction", 2, 1 * GIB, (376.0, 380.0),
           "nccl#1264 (p2pBandwidthLatencyTest unidirectional 380; 376 reported there by another user)",
           sendrecv=True),
    Anchor(HGX_H100, "inter-node, one 400G NDR NIC per GPU (ring)", 2, 8 * GIB, (46.0, 48.0),
           "nccl-tests#290 (NVIDIA: 46-48 GB/s per NDR NIC with NCCL_ALGO=RING)", "ring", 1),
    Anchor(HGX_H100, "2 x HGX H200 over InfiniBand (16 GPUs)", 16, GIB // 2, (421.6, 432.9),
           "SkyPilot's CoreWeave example (docs.skypilot.co, coreweave_infiniband): 421.59 / 432.86 at 512 MiB"),
    Anchor(HGX_H100, "2 x HGX H200 over InfiniBand (16 GPUs)", 16, 1 * GIB, (455.0, 456.0),
           "SkyPilot's CoreWeave example (docs.skypilot.co, coreweave_infiniband): 455.85 / 454.96 at 1 GiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 1 rack (72 GPUs)", 72, GIB // 2, (576.7, 586.1),
           "coreweave/nccl-tests#43: 586.06 / 576.74 at 512 MiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 1 rack (72 GPUs)", 72, 1 * GIB, (681.2, 724.1),
           "coreweave/nccl-tests#43: 681.17 / 724.06 at 1 GiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 1 rack (72 GPUs)", 72, 2 * GIB, (757.8, 773.6),
           "coreweave/nccl-tests#43: 757.78 / 773.62 at 2 GiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 1 rack (72 GPUs)", 72, 4 * GIB, (835.0, 839.0),
           "coreweave/nccl-tests#43: 839.16 / 835.32 at 4 GiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 1 rack (72 GPUs)", 72, 8 * GIB, (835.0, 847.0),
           "coreweave/nccl-tests#43: 834.57 / 846.82 at 8 GiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 2 racks (144 GPUs)", 144, 8 * GIB, (793.0, 820.0),
           "coreweave/nccl-tests#43, multi-rack example (figures from the issue; not seen in our excerpt)"),
    Anchor(GB200_NVL72, "GB200 NVL72, 20 racks (1,440 GPUs)", 1440, GIB // 2, (150.2, 151.0),
           "coreweave/nccl-tests#48: 150.95 / 150.16 at 512 MiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 20 racks (1,440 GPUs)", 1440, 1 * GIB, (218.5, 219.0),
           "coreweave/nccl-tests#48: 218.85 / 218.54 at 1 GiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 20 racks (1,440 GPUs)", 1440, 4 * GIB, (343.7, 346.4),
           "coreweave/nccl-tests#48: 346.38 / 343.71 at 4 GiB"),
    Anchor(GB200_NVL72, "GB200 NVL72, 20 racks (1,440 GPUs)", 1440, 8 * GIB, (381.0, 406.0),
           "coreweave/nccl-tests#48 (8 GiB figures from the issue; not seen in our excerpt)"),
)  # fmt: skip


def size(num_bytes: int) -> str:
    return f"{num_bytes // GIB} GiB" if num_bytes >= GIB else f"{num_bytes // 2**20} MiB"


def modelled(anchor: Anchor) -> float:
    if anchor.sendrecv:
        return sendrecv_busbw(anchor.fabric, anchor.size_bytes)
    return allreduce_busbw(anchor.fabric, anchor.size_bytes, anchor.gpus, anchor.algorithm, anchor.per_domain)


def algorithm(anchor: Anchor) -> str:
    if anchor.sendrecv:
        return "send/recv"
    return allreduce_ms(anchor.fabric, anchor.size_bytes, anchor.gpus, anchor.algorithm, anchor.per_domain)[1]


def error(anchor: Anchor) -> float:
    """Signed relative error against the nearer end of the published range (0 inside it)."""
    low, high = anchor.published
    value = modelled(anchor)
    return value / low - 1 if value < low else value / high - 1 if value > high else 0.0


def cost_model_charge(anchor: Anchor) -> float:
    """The bandwidth the placer's cost model gives this all-reduce: a ring at the slowest level it crosses,
    on the simulator's default topology for the fabric (which is what a ring's bus bandwidth is)."""
    if anchor.fabric is GB200_NVL72:
        topology = nvl72_topology(max(1, anchor.gpus // 72))
    else:
        topology = Topology.uniform(max(2, anchor.gpus // 8))
    per_node = topology.node_gpu_count[0]
    k = anchor.per_domain or min(anchor.gpus, anchor.fabric.domain_gpus)
    if anchor.gpus <= per_node and anchor.per_domain is None:
        return topology.level_bandwidth(0)
    domain_nodes = max(1, anchor.fabric.domain_gpus // per_node)
    nodes = [d * domain_nodes + i for d in range(-(-anchor.gpus // k)) for i in range(max(1, k // per_node))]
    return topology.level_bandwidth(nodes_common_level(topology, nodes))


def table(anchors: Sequence[Anchor] = ANCHORS) -> str:
    lines = [
        "| fabric and run | GPUs | message | published busbw (GB/s) | modelled (GB/s) | algorithm | error |"
        " cost model's ring (GB/s) |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for a in anchors:
        low, high = a.published
        pub = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        lines.append(
            f"| {a.what} | {a.gpus:,} | {size(a.size_bytes)} | {pub} | {modelled(a):.0f} | {algorithm(a)} |"
            f" {error(a):+.0%} | {cost_model_charge(a):g} |"
        )
    return "\n".join(lines)


def main() -> int:
    print(table())
    print()
    for a in ANCHORS:
        print(f"- {a.what}, {size(a.size_bytes)}: {a.source}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

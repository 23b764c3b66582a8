"""Collective times as NCCL measurably gets them: an algorithm-aware all-reduce calibrated on published runs.

The cost models price every ring at the bandwidth of its slowest link (``cost.ring_allreduce_ms``), the
form the placer minimises. This module is the check on that arithmetic and the clock of the simulator's
step time (``core.timing.stepcomm`` times the cost model's collectives with it): for a fabric (NVLink domains of
some size, NICs between them) it says how long an all-reduce of ``S`` bytes over ``n`` GPUs takes under
each algorithm NCCL has, and which one is fastest, so its bus bandwidth can be set beside published
NCCL-tests figures (docs/simulator.md, "Calibration"; ``tests/sim/test_calibration.py`` pins them within
20%).

* **ring**: ``2(n-1)`` steps of latency ``alpha``, ``2(n-1)/n x S`` per GPU at the ring's bottleneck. Inside a
  domain that is NVLink at the protocol's efficiency; a ring over several domains crosses each boundary once
  per channel, and the channels spread over the NICs of the node at the boundary (``CHANNELS_PER_NIC`` each).
* **NVLS** (NVLink SHARP, one domain): the switch reduces, so each GPU's data crosses its link once each way;
  its achieved algorithm bandwidth is a property of the switch generation, taken from one published run,
  and its fixed cost grows with the GPUs on the switch (the one-rack run's size sweep: about 0.5 ms).
* **tree** (NVLS-tree across domains): reduce-scatter inside each domain, an all-reduce of the ``1/k`` shard
  between domains over each GPU's own NIC, all-gather inside; NCCL pipelines the stages, so the slower one
  paces the whole. Published runs show it only on a few domains (``TREE_MAX_DOMAINS``); beyond, a ring.

Bandwidths are GB/s per GPU per direction (1 GB = 1e9 bytes); bus bandwidth is nccl-tests' ``algbw x
2(n-1)/n``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NVLINK_EFFICIENCY = 370.0 / 450.0  # NCCL's effective NVLink rate over line rate (H100: 370 of 450 GB/s)
NIC_EFFICIENCY = 0.95  # 47.5 of a 400 Gb/s NIC's 50 GB/s (published: 46-48 per NDR NIC)
RING_CHANNELS = 8  # ring channels crossing a domain boundary, one NIC each (fitted to the 20-rack run, see docs)
RING_STEP_LATENCY_US = 1.8  # per ring step (fitted to the 20-rack GB200 size sweep's fixed cost)
NVLS_LATENCY_PER_GPU_US = 7.4  # an NVLS pass costs this per GPU of the domain (fitted: 0.53 ms on 72 GPUs)
TREE_MAX_DOMAINS = 3  # NVLS-tree seen on up to 2-3 domains; a ring beyond (docs/simulator.md)
ALGORITHMS = ("ring", "nvls", "tree")


@dataclass(frozen=True, slots=True)
class Fabric:
    """NVLink domains (HGX nodes or NVL72 racks) of ``domain_gpus`` GPUs, nodes of ``node_gpus`` GPUs with
    ``node_nics`` NICs, and a network between domains."""

    name: str
    domain_gpus: int
    node_gpus: int
    node_nics: int
    nvlink_gbps: float  # line rate per GPU per direction
    nvls_algbw_gbps: float | None  # NVLS all-reduce algorithm bandwidth in one domain; None: no NVLS
    nic_gbps: float = 50.0

    @property
    def nvlink_effective(self) -> float:
        return NVLINK_EFFICIENCY * self.nvlink_gbps

    @property
    def nic_effective(self) -> float:
        return NIC_EFFICIENCY * self.nic_gbps


HGX_H100 = Fabric("HGX H100/H200", 8, 8, 8, 450.0, 275.0)
GB200_NVL72 = Fabric("GB200 NVL72", 72, 4, 4, 900.0, 421.0)


def _layout(fabric: Fabric, gpus: int, per_domain: int | None) -> tuple[int, int]:
    """(domains, GPUs per domain): the group fills domains in order unless ``per_domain`` says otherwise."""
    k = min(gpus, fabric.domain_gpus) if per_domain is None else per_domain
    if not 1 <= k <= fabric.domain_gpus:
        raise ValueError(f"per_domain must be 1..{fabric.domain_gpus}, got {k}")
    return math.ceil(gpus / k), k


def ring_ms(fabric: Fabric, num_bytes: float, gpus: int, per_domain: int | None = None) -> float:
    if gpus <= 1:
        return 0.0
    domains, k = _layout(fabric, gpus, per_domain)
    bandwidth = fabric.nvlink_effective
    if domains > 1:
        nics = max(1, k * fabric.node_nics // fabric.node_gpus)
        bandwidth = min(bandwidth, min(RING_CHANNELS, nics) * fabric.nic_effective)
    steps = 2 * (gpus - 1)
    return steps * RING_STEP_LATENCY_US / 1e3 + steps / gpus * num_bytes / (bandwidth * 1e9) * 1e3


def nvls_ms(fabric: Fabric, num_bytes: float, gpus: int, per_domain: int | None = None) -> float | None:
    domains, _ = _layout(fabric, gpus, per_domain)
    if fabric.nvls_algbw_gbps is None or domains > 1 or gpus <= 2:
        return None
    return NVLS_LATENCY_PER_GPU_US * gpus / 1e3 + num_bytes / (fabric.nvls_algbw_gbps * 1e9) * 1e3


def tree_ms(fabric: Fabric, num_bytes: float, gpus: int, per_domain: int | None = None) -> float | None:
    domains, k = _layout(fabric, gpus, per_domain)
    if fabric.nvls_algbw_gbps is None or not 1 < domains <= TREE_MAX_DOMAINS or k <= 2 or gpus != domains * k:
        return None
    inside = num_bytes / (fabric.nvls_algbw_gbps * 1e9) * 1e3
    between = 2 * (domains - 1) / domains * num_bytes / k / (fabric.nic_effective * 1e9) * 1e3
    latency = (NVLS_LATENCY_PER_GPU_US * k + 2 * math.ceil(math.log2(domains)) * RING_STEP_LATENCY_US) / 1e3
    return latency + max(inside, between)


def allreduce_ms(
    fabric: Fabric, num_bytes: float, gpus: int, algorithm: str | None = None, per_domain: int | None = None
) -> tuple[float, str]:
    """(milliseconds, algorithm) for one all-reduce of ``num_bytes`` over ``gpus`` GPUs, ``per_domain`` in
    each NVLink domain (default: filling domains in order); ``algorithm`` forces one (as ``NCCL_ALGO``
    does), else the fastest available is taken, as NCCL's tuner aims to."""
    times = {"ring": ring_ms(fabric, num_bytes, gpus, per_domain), "nvls": nvls_ms(fabric, num_bytes, gpus, per_domain),
             "tree": tree_ms(fabric, num_bytes, gpus, per_domain)}  # fmt: skip
    if algorithm is not None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose from {list(ALGORITHMS)}")
        chosen = times[algorithm]
        if chosen is None:
            raise ValueError(f"{algorithm} is not available for {gpus} GPUs on {fabric.name}")
        return chosen, algorithm
    name, best = min(((n, t) for n, t in times.items() if t is not None), key=lambda item: item[1])
    return best, name


def allreduce_busbw(
    fabric: Fabric, num_bytes: float, gpus: int, algorithm: str | None = None, per_domain: int | None = None
) -> float:
    """nccl-tests' bus bandwidth (GB/s) of that all-reduce."""
    ms, _ = allreduce_ms(fabric, num_bytes, gpus, algorithm, per_domain)
    return num_bytes / (ms / 1e3) / 1e9 * 2 * (gpus - 1) / gpus


def sendrecv_busbw(fabric: Fabric, num_bytes: float, *, same_domain: bool = True) -> float:
    """One GPU sending to another (nccl-tests' sendrecv: bus bandwidth = algorithm bandwidth)."""
    bandwidth = fabric.nvlink_effective if same_domain else fabric.nic_effective
    ms = RING_STEP_LATENCY_US / 1e3 + num_bytes / (bandwidth * 1e9) * 1e3
    return num_bytes / (ms / 1e3) / 1e9

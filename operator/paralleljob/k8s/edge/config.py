"""The operator's settings: topology label keys and bandwidths, queueing, timers, ports.

Pure values with defaults from SPEC section 4; :func:`load_topology_file` reads the same shape the Helm
chart's values use, so a cluster with other fabric labels needs a file, not a code change.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from paralleljob.core.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class LevelSource:
    """One topology level above the node: its name, the node labels that name a node's domain there (first
    one present wins), and the per-GPU bandwidth between nodes that share it."""

    name: str
    labels: tuple[str, ...]
    bandwidth_gbps: float
    # A multi-node NVLink domain (the GB200/GB300 clique): its bandwidth is what a job gets across its trays
    # only through a ComputeDomain (IMEX channel), which the operator creates only for jobs on whole trays
    # (plan/admission/trayadmission); for any other job two trays of one clique talk over the network, and the view
    # prices the level as the one above it.
    nvlink_domain: bool = False

    def value(self, labels: Mapping[str, str]) -> str | None:
        """The node's domain at this level: the first of its labels with a value (None: no such label)."""
        return next((labels[key] for key in self.labels if labels.get(key)), None)


def nvlink_clique(labels: Mapping[str, str], levels: Sequence[LevelSource]) -> str | None:
    """A node's NVLink clique: its domain at the first NVLink-domain level (``nvidia.com/gpu.clique``, or
    Topograph's label, whichever the configuration names and the node carries); None on an HGX node. The one
    reading of a clique: the view's gone trays and the tray records take it from here, so a cluster labelled
    by Topograph keeps its cliques as one labelled by GPU Feature Discovery does."""
    level = next((lv for lv in levels if lv.nvlink_domain), None)
    return level.value(labels) if level is not None else None


DEFAULT_LEVELS: tuple[LevelSource, ...] = (
    LevelSource(
        "clique",
        ("nvidia.com/gpu.clique", "accelerator.topograph.run/domain", "network.topology.nvidia.com/accelerator"),
        450.0,
        nvlink_domain=True,
    ),
    LevelSource("leaf", ("fabric.topograph.run/tier-1", "network.topology.nvidia.com/leaf"), 50.0),
    LevelSource("spine", ("fabric.topograph.run/tier-2", "network.topology.nvidia.com/spine"), 40.0),
    LevelSource("core", ("fabric.topograph.run/tier-3", "network.topology.nvidia.com/core"), 30.0),
    LevelSource("zone", ("topology.kubernetes.io/zone",), 25.0),
)

# NoSchedule taints with these keys are expected on GPU nodes (pods tolerate them), so they do not close a node.
DEFAULT_TOLERATED_TAINTS: tuple[str, ...] = ("nvidia.com/gpu",)


# Larger than any GPU node built today (8 in HGX/DGX, 16 in DGX-2, 4 per GB200 tray); a sanity cap only.
DEFAULT_MAX_GPUS_PER_NODE = 16


@dataclass(frozen=True, slots=True)
class TopologyConfig:
    node_bandwidth_gbps: float = 600.0
    levels: tuple[LevelSource, ...] = DEFAULT_LEVELS
    cluster_bandwidth_gbps: float = 12.5
    default_gpu_memory_gib: float = 80.0  # when a node has no (valid) nvidia.com/gpu.memory label
    tolerated_taints: tuple[str, ...] = DEFAULT_TOLERATED_TAINTS
    # A node reporting more allocatable GPUs than this is used with this many (and gets a warning event).
    max_gpus_per_node: int = DEFAULT_MAX_GPUS_PER_NODE
    # GPUs of a DRA node sharing a resource.kubernetes.io/pcieRoot form a level below the node with this
    # per-GPU bandwidth (and node_bandwidth_gbps is then that between two roots of a node). 0: no such level,
    # right for NVSwitch nodes, where every GPU pair of a node talks at NVLink speed whatever its root.
    pcie_root_bandwidth_gbps: float = 0.0
    # Warm spares: whole free trays per NVLink clique that take no new gang; a repair may use them, so a
    # failed tray is replaced inside its clique (docs/nvl72.md "Warm spares").
    nvlink_spares_per_clique: int = 0

    def __post_init__(self) -> None:
        previous = ("node", self.node_bandwidth_gbps)
        for name, bandwidth in [
            *((lv.name, lv.bandwidth_gbps) for lv in self.levels),
            ("cluster", self.cluster_bandwidth_gbps),
        ]:
            if not bandwidth > 0:
                raise InvalidRequest(f"topology level {name!r} needs a positive bandwidth, got {bandwidth}")
            if bandwidth > previous[1]:
                raise InvalidRequest(
                    f"topology level {name!r} ({bandwidth} GB/s) is faster than {previous[0]!r} below it"
                    f" ({previous[1]} GB/s); bandwidth must not grow going up"
                )
            previous = (name, bandwidth)
        if self.pcie_root_bandwidth_gbps and not self.pcie_root_bandwidth_gbps >= self.node_bandwidth_gbps:
            raise InvalidRequest(
                f"pcieRootBandwidthGbps ({self.pcie_root_bandwidth_gbps}) must be 0 (off) or at least"
                f" nodeBandwidthGbps ({self.node_bandwidth_gbps}): GPUs under one root talk at least as fast"
                " as across the node"
            )
        if self.nvlink_spares_per_clique < 0:
            raise InvalidRequest(f"nvlinkSparesPerClique must be 0 or more, got {self.nvlink_spares_per_clique}")
        if self.max_gpus_per_node < 1:
            raise InvalidRequest(f"maxGpusPerNode must be at least 1, got {self.max_gpus_per_node}")
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names) or {"node", "cluster"} & set(names):
            raise InvalidRequest(f"topology level names must be unique and not 'node'/'cluster': {names}")


@dataclass(frozen=True, slots=True)
class DraConfig:
    """Which DRA driver's devices are GPUs (``dra.py``), and the DeviceClass the operator's claims name.
    An empty driver turns DRA off: resource.k8s.io objects are then neither listed nor watched."""

    driver: str = "gpu.nvidia.com"
    device_class: str = "gpu.nvidia.com"

    @property
    def enabled(self) -> bool:
        return bool(self.driver)


# API requests the operator keeps in flight. 96, not 48: on the 2-core dev cluster a wave of 50 gangs x 40
# pods was bound 13% faster (medians of four runs, 202 against 179 pods/s), while drains of 1,500 jobs and a
# repair in the middle of a wave took as long with either (docs/benchmarks.md, "The operator's request slots").
DEFAULT_WRITE_CONCURRENCY = 96


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    dra: DraConfig = field(default_factory=DraConfig)
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    resync_seconds: float = 30.0  # a pass over everything at least this often, level-triggered
    relist_seconds: float = 300.0  # each reflector lists its kind again this often (a safety net under watches)
    # young collections rarely, full ones once a minute (runtime/memory/gctuning.py), and the C heap's free pages
    # given back every 10 s (runtime/memory/memtrim.py)
    tune_gc: bool = True
    pass_share: float = 0.5  # most of the event loop's time passes may take back to back (reconciler.yield_after)
    # Chains that only record a waiting job's status, in flight at once; more wait for a later pass undecided
    # (a flood's thousands of first "Queued" writes would otherwise each hold a task and its decisions).
    background_chains: int = 512
    # A waiting job's message that only restates its wait with other figures ("needs 4 GPUs; 3 are free") is
    # rewritten at most this often (0: whenever it changes); a new reason is written at once.
    waiting_message_refresh_s: float = 30.0
    # The kept cluster view is compared with a rebuild every so many passes or seconds (0: not by that).
    view_check_passes: int = 1000
    view_check_seconds: float = 300.0
    metrics_port: int = 8080
    metrics_host: str = "0.0.0.0"
    lease_name: str = "paralleljob-operator"
    lease_namespace: str = "default"
    lease_duration_seconds: float = 15.0
    identity: str = ""
    strict_fifo: bool = True  # a queue's head blocks the jobs behind it (Kueue's StrictFIFO)
    # strict-fifo (the operator's own per-queue FIFO) | fair | fair-backfill | fair-backfill-preempt (the core's)
    queue_policy: str = "strict-fifo"
    preemption_grace_seconds: float = 30.0  # a preempted job's time to checkpoint before its pods go
    write_concurrency: int = DEFAULT_WRITE_CONCURRENCY  # API requests in flight at once
    crash_after_binds: int = 0  # test hook: exit hard after this many binds (0: never)
    kill_task: str = ""  # test hook, "<task>:<seconds>": cancel that supervised task then (PARALLELJOB_KILL_TASK)

    def with_identity(self) -> OperatorConfig:
        if self.identity:
            return self
        # A pod restarted under the same name takes its own lease back at once (see lease.py).
        return replace(self, identity=os.environ.get("POD_NAME") or socket.gethostname())


def _levels_from(values: Sequence[Mapping[str, Any]]) -> tuple[LevelSource, ...]:
    out = []
    for i, item in enumerate(values):
        if not isinstance(item, Mapping):
            raise InvalidRequest(f"topology.levels[{i}] must be a mapping with name, labels, bandwidthGbps")
        labels = item.get("labels", [])
        if isinstance(labels, str):
            labels = [labels]
        try:
            names = tuple(str(x) for x in labels)
            # Unsaid: the GPU Feature Discovery clique label is an NVLink domain, any other label is not.
            nvlink = bool(item.get("nvlinkDomain", "nvidia.com/gpu.clique" in names))
            out.append(LevelSource(str(item["name"]), names, float(item["bandwidthGbps"]), nvlink))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRequest(
                f"topology.levels[{i}] needs name, labels and a numeric bandwidthGbps: {exc}"
            ) from None
    return tuple(out)


def topology_from_mapping(data: Mapping[str, Any]) -> TopologyConfig:
    """``{nodeBandwidthGbps, clusterBandwidthGbps, defaultGpuMemoryGiB, toleratedTaints, maxGpusPerNode,
    pcieRootBandwidthGbps, nvlinkSparesPerClique, levels: [...]}``."""
    base = TopologyConfig()
    try:
        return TopologyConfig(
            node_bandwidth_gbps=float(data.get("nodeBandwidthGbps", base.node_bandwidth_gbps)),
            levels=_levels_from(data["levels"]) if "levels" in data else base.levels,
            cluster_bandwidth_gbps=float(data.get("clusterBandwidthGbps", base.cluster_bandwidth_gbps)),
            default_gpu_memory_gib=float(data.get("defaultGpuMemoryGiB", base.default_gpu_memory_gib)),
            tolerated_taints=tuple(str(x) for x in data.get("toleratedTaints", base.tolerated_taints)),
            max_gpus_per_node=int(data.get("maxGpusPerNode", base.max_gpus_per_node)),
            pcie_root_bandwidth_gbps=float(data.get("pcieRootBandwidthGbps", base.pcie_root_bandwidth_gbps)),
            nvlink_spares_per_clique=int(data.get("nvlinkSparesPerClique", base.nvlink_spares_per_clique)),
        )
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"bad topology configuration: {exc}") from None


def load_topology_file(path: Path) -> TopologyConfig:
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{path}: expected a mapping at the top")
    return topology_from_mapping(data.get("topology", data))

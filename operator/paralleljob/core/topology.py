"""Immutable cluster topology: nodes, their GPUs, and a tree of network domains above them.

Level 0 is the node (GPUs that share NVLink/NVSwitch). Levels 1..L are domains above nodes, e.g. an
NVLink clique, a leaf switch/rack, a spine/block, a zone; the last level is the whole cluster (one domain).
Each level has a per-GPU bandwidth in GB/s; two GPUs communicate at the bandwidth of the lowest level
they share. Optionally a level sits *below* the node (``sub_level``): GPUs of one node grouped into
domains such as PCIe root complexes, two GPUs of the same one talking at its (higher) bandwidth; the node
level's bandwidth is then that between two such domains of one node. Domains are stored densely:
``domain_of[level][node]`` is an int, so the lowest common level of two nodes is a handful of list
look-ups and never a walk over objects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from paralleljob.core.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class Level:
    name: str
    bandwidth_gbps: float


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as the topology sees it. ``domains`` names its domain at each level above the node."""

    name: str
    gpu_count: int
    gpu_memory_gb: float = 80.0
    domains: tuple[str, ...] = ()
    gpu_product: str = ""
    # The domain below the node of each GPU (e.g. its PCIe root), read only when the topology has a
    # sub-level; empty: the node's GPUs share one such domain.
    gpu_domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    """Nodes, GPU ids and the domain tree. Build with :meth:`uniform` or :meth:`from_nodes`."""

    levels: tuple[Level, ...]
    node_names: tuple[str, ...]
    node_gpu_count: tuple[int, ...]
    node_gpu_memory_gb: tuple[float, ...]
    node_first_gpu: tuple[int, ...]
    domain_of: tuple[tuple[int, ...], ...]  # [level][node] -> domain index at that level (level 0: node)
    domain_names: tuple[tuple[str, ...], ...]  # [level][domain] -> name
    gpu_node: tuple[int, ...] = field(repr=False)  # [gpu] -> node
    sub_level: Level | None = None  # a level below the node (see the module docstring), or none
    gpu_subdomain: tuple[int, ...] = field(default=(), repr=False)  # [gpu] -> sub-level domain in its node
    # The level whose domains are NVLink domains (cliques of trays, as on GB200/GB300 NVL72; see
    # core/nvl72/nvlink.py); 0: the node is the NVLink domain, as on HGX, and a TP group stays in one node.
    nvlink_level: int = 0

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def uniform(
        cls,
        num_nodes: int,
        gpus_per_node: int = 8,
        *,
        intra_node_bw_gbps: float = 600.0,
        levels: Sequence[tuple[str, int, float]] = (),
        inter_node_bw_gbps: float = 50.0,
        gpu_memory_gb: float = 80.0,
    ) -> Topology:
        """A homogeneous cluster. ``levels`` lists (name, nodes per domain, bandwidth) bottom-up for the
        levels between node and cluster, e.g. ``[("rack", 32, 100.0), ("spine", 512, 50.0)]``; the
        cluster level on top always has ``inter_node_bw_gbps``."""
        if num_nodes < 1:
            raise InvalidRequest(f"num_nodes must be >= 1, got {num_nodes}")
        if gpus_per_node < 1:
            raise InvalidRequest(f"gpus_per_node must be >= 1, got {gpus_per_node}")
        specs = []
        for n in range(num_nodes):
            domains = (*(f"{name}-{n // size}" for name, size, _ in levels), "cluster")
            specs.append(NodeSpec(f"node-{n}", gpus_per_node, gpu_memory_gb, domains))
        level_defs = [Level("node", intra_node_bw_gbps)]
        level_defs += [Level(name, bw) for name, _, bw in levels]
        level_defs.append(Level("cluster", inter_node_bw_gbps))
        return cls.from_nodes(specs, level_defs)

    @classmethod
    def empty(cls) -> Topology:
        """A cluster without nodes (no GPU nodes yet): a node level and one cluster domain above nothing, so
        a shell holds an empty topology and state instead of None (every query answers "nothing here")."""
        return cls(
            levels=(Level("node", 1.0), Level("cluster", 1.0)),
            node_names=(),
            node_gpu_count=(),
            node_gpu_memory_gb=(),
            node_first_gpu=(),
            domain_of=((), ()),
            domain_names=((), ("cluster",)),
            gpu_node=(),
        )

    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[NodeSpec],
        levels: Sequence[Level],
        sub_level: Level | None = None,
        nvlink_level: int = 0,
    ) -> Topology:
        """General constructor. ``levels[0]`` is the node level; every node names one domain per
        higher level (``len(levels) - 1`` names); a domain must sit inside one parent domain. With
        ``sub_level``, each node's ``gpu_domains`` group its GPUs below the node. ``nvlink_level`` names
        the level whose domains are NVLink domains (a node outside any multi-node domain names one of
        its own there)."""
        if not 0 <= nvlink_level < max(1, len(levels)):
            raise InvalidRequest(f"nvlink_level {nvlink_level} is not a level of this topology")
        if not nodes:
            raise InvalidRequest("a topology needs at least one node")
        if not levels:
            raise InvalidRequest("a topology needs at least the node level")
        for definition in levels:
            if not definition.bandwidth_gbps > 0:
                raise InvalidRequest(f"level {definition.name!r} needs a positive bandwidth")
        upper = len(levels) - 1
        for spec in nodes:
            if len(spec.domains) != upper:
                raise InvalidRequest(
                    f"node {spec.name!r} names {len(spec.domains)} domains, the topology has {upper} levels"
                )
        names: list[list[str]] = [[spec.name for spec in nodes]]
        domain_of: list[list[int]] = [list(range(len(nodes)))]
        if len({spec.name for spec in nodes}) != len(nodes):
            raise InvalidRequest("node names must be unique")
        for level in range(1, upper + 1):
            index: dict[str, int] = {}
            row = []
            for spec in nodes:
                row.append(index.setdefault(spec.domains[level - 1], len(index)))
            domain_of.append(row)
            names.append(list(index))
        _check_tree(domain_of, names, levels)
        first, gpu_node, offset = [], [], 0
        for n, spec in enumerate(nodes):
            if spec.gpu_count < 0:
                raise InvalidRequest(f"node {spec.name!r} has a negative GPU count")
            first.append(offset)
            gpu_node.extend([n] * spec.gpu_count)
            offset += spec.gpu_count
        return cls(
            nvlink_level=nvlink_level,
            sub_level=sub_level,
            gpu_subdomain=_subdomains(nodes, levels[0], sub_level),
            levels=tuple(levels),
            node_names=tuple(names[0]),
            node_gpu_count=tuple(spec.gpu_count for spec in nodes),
            node_gpu_memory_gb=tuple(float(spec.gpu_memory_gb) for spec in nodes),
            node_first_gpu=tuple(first),
            domain_of=tuple(tuple(row) for row in domain_of),
            domain_names=tuple(tuple(row) for row in names),
            gpu_node=tuple(gpu_node),
        )

    # ---- queries ------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_node)

    @property
    def top(self) -> int:
        """Index of the highest level."""
        return len(self.levels) - 1

    @cached_property
    def max_gpus_per_node(self) -> int:
        return max(self.node_gpu_count, default=0)

    @cached_property
    def max_gpu_memory_gb(self) -> float:
        return max(self.node_gpu_memory_gb, default=0.0)

    def group_capacity(self, tp: int, memory_gb: float) -> int:
        """TP groups of ``tp`` GPUs with ``memory_gb`` each that the whole cluster holds when empty."""
        cache: dict[tuple[int, float], int] = self.__dict__.setdefault("_group_capacity", {})
        key = (tp, memory_gb)
        if key not in cache:
            cache[key] = sum(
                count // tp
                for count, memory in zip(self.node_gpu_count, self.node_gpu_memory_gb, strict=True)
                if memory >= memory_gb
            )
        return cache[key]

    def num_domains(self, level: int) -> int:
        return len(self.domain_names[level])

    def domain_gpu_counts(self, level: int) -> tuple[int, ...]:
        """GPUs per domain of ``level`` (level 0: per node); computed once per level."""
        cache: dict[int, tuple[int, ...]] = self.__dict__.setdefault("_domain_gpu_counts", {})
        if level not in cache:
            out = [0] * self.num_domains(level)
            for node, dom in enumerate(self.domain_of[level]):
                out[dom] += self.node_gpu_count[node]
            cache[level] = tuple(out)
        return cache[level]

    def node_gpus(self, node: int) -> range:
        start = self.node_first_gpu[node]
        return range(start, start + self.node_gpu_count[node])

    def common_level(self, node_a: int, node_b: int) -> int:
        """Lowest level whose domain contains both nodes (0 when they are the same node)."""
        if node_a == node_b:
            return 0
        for level in range(1, len(self.levels)):
            row = self.domain_of[level]
            if row[node_a] == row[node_b]:
                return level
        return self.top  # unreachable for a valid tree: the top level has one domain

    def level_bandwidth(self, level: int) -> float:
        return self.levels[level].bandwidth_gbps

    def bandwidth_between_nodes(self, node_a: int, node_b: int) -> float:
        return self.levels[self.common_level(node_a, node_b)].bandwidth_gbps

    def bandwidth_between(self, gpu_a: int, gpu_b: int) -> float:
        """GB/s between two GPUs: infinite for the same GPU, else the lowest shared level's bandwidth."""
        self.check_gpu(gpu_a)
        self.check_gpu(gpu_b)
        if gpu_a == gpu_b:
            return math.inf
        if self.sub_level is not None and self.same_subdomain((gpu_a, gpu_b)):
            return self.sub_level.bandwidth_gbps
        return self.bandwidth_between_nodes(self.gpu_node[gpu_a], self.gpu_node[gpu_b])

    def same_subdomain(self, gpus: Sequence[int]) -> bool:
        """True when the GPUs share one node and, with a sub-level, one domain of it."""
        if len({self.gpu_node[g] for g in gpus}) > 1:
            return False
        return self.sub_level is None or len({self.gpu_subdomain[g] for g in gpus}) <= 1

    def check_gpu(self, gpu_id: int) -> None:
        if isinstance(gpu_id, bool) or not isinstance(gpu_id, int):
            raise InvalidRequest(f"GPU id must be an int, got {gpu_id!r}")
        if not 0 <= gpu_id < len(self.gpu_node):
            raise InvalidRequest(f"unknown GPU id {gpu_id}: the cluster has GPUs 0..{len(self.gpu_node) - 1}")

    def node_index(self, name: str) -> int:
        try:
            return self.node_names.index(name)
        except ValueError:
            raise InvalidRequest(f"unknown node {name!r}") from None


def _subdomains(nodes: Sequence[NodeSpec], node_level: Level, sub_level: Level | None) -> tuple[int, ...]:
    """Per GPU, the index of its sub-level domain within its node (names are local to the node)."""
    if sub_level is None:
        return ()
    if not sub_level.bandwidth_gbps >= node_level.bandwidth_gbps:
        raise InvalidRequest(
            f"level {sub_level.name!r} below the node ({sub_level.bandwidth_gbps} GB/s) is slower than the node"
            f" level ({node_level.bandwidth_gbps} GB/s); bandwidth must not grow going up"
        )
    out: list[int] = []
    for spec in nodes:
        if spec.gpu_domains and len(spec.gpu_domains) != spec.gpu_count:
            raise InvalidRequest(
                f"node {spec.name!r} names {len(spec.gpu_domains)} GPU domains for {spec.gpu_count} GPUs"
            )
        index: dict[str, int] = {}
        out.extend(index.setdefault(name, len(index)) for name in spec.gpu_domains or ("",) * spec.gpu_count)
    return tuple(out)


def _check_tree(domain_of: list[list[int]], names: list[list[str]], levels: Sequence[Level]) -> None:
    """Every domain sits in exactly one parent, bandwidth never grows going up, one domain on top."""
    for level in range(1, len(domain_of)):
        parent: dict[int, int] = {}
        for node, dom in enumerate(domain_of[level - 1]):
            up = domain_of[level][node]
            if parent.setdefault(dom, up) != up:
                raise InvalidRequest(
                    f"{levels[level - 1].name} {names[level - 1][dom]!r} spans two {levels[level].name}s"
                )
        if levels[level].bandwidth_gbps > levels[level - 1].bandwidth_gbps:
            raise InvalidRequest(
                f"level {levels[level].name!r} is faster than the level below it; bandwidth must not grow upward"
            )
    if len(names[-1]) != 1:
        raise InvalidRequest(f"the top level {levels[-1].name!r} must be a single domain (add a cluster level)")


class TopologyIndex:
    """Derived look-ups (parents, children, memory classes) computed once per topology."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        top = topology.top
        self.parent: list[list[int]] = []  # [level][domain] -> domain at level + 1
        self.children: list[list[list[int]]] = [[] for _ in range(top + 1)]  # [level][domain] -> level-1 doms
        for level in range(top):
            row = [0] * topology.num_domains(level)
            for node in range(topology.num_nodes):
                row[topology.domain_of[level][node]] = topology.domain_of[level + 1][node]
            self.parent.append(row)
            kids: list[list[int]] = [[] for _ in range(topology.num_domains(level + 1))]
            for dom, up in enumerate(row):
                kids[up].append(dom)
            self.children[level + 1] = kids
        self.memory_classes: tuple[float, ...] = tuple(sorted(set(topology.node_gpu_memory_gb)))
        self.node_memory_class: tuple[int, ...] = tuple(
            self.memory_classes.index(m) for m in topology.node_gpu_memory_gb
        )

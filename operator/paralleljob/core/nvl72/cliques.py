"""NVLink domains larger than a node (GB200/GB300 NVL72 racks): which trays form which clique.

A topology whose ``nvlink_level`` is above the node has NVLink domains of several nodes ("trays"): every
tray of a clique talks to every other at the clique level's bandwidth. Nodes without multi-node NVLink (HGX)
name a clique of their own at that level, so one tree holds both kinds. This module derives, once per
topology, what the NVLink placer (``core/nvl72/nvlink``) counts with:

* the multi-node cliques, their trays and GPUs per tray (uniform inside a clique, as on real racks);
* the *clique topology*: one node per multi-node clique, the clique's bandwidth as its node level and the
  levels above it unchanged. A job that takes whole trays of cliques is exactly a job placed on that
  topology, with as many free GPUs per clique-node as its whole free trays hold (see ``core/nvl72/nvlink``).
  Its "GPUs" are units of ``unit`` GPUs (a divisor of the tray size and of the job's TP), which keeps the
  clique topology's per-node counters as small as a tray count rather than a GPU count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paralleljob.core.errors import InvalidRequest
from paralleljob.core.job import JobSpec
from paralleljob.core.topology import Level, NodeSpec, Topology


@dataclass(frozen=True)
class CliqueIndex:
    topology: Topology
    level: int  # the topology's NVLink level
    cliques: tuple[int, ...]  # domains at ``level`` with more than one node, ascending
    tray_nodes: tuple[tuple[int, ...], ...]  # [i] -> the trays (nodes) of cliques[i], ascending
    tray_gpus: tuple[int, ...]  # [i] -> GPUs per tray of cliques[i]
    position: dict[int, int]  # clique domain -> i
    single_nodes: tuple[int, ...]  # nodes outside every multi-node clique (NVLink = the node)
    _derived: dict[int, Topology] = field(default_factory=dict, repr=False, compare=False)
    _verdicts: dict[tuple[int, float, int], list[str]] = field(default_factory=dict, repr=False, compare=False)

    def single_topology(self) -> Topology:
        """The nodes outside every multi-node clique alone, with the levels and domains they have: the
        NVLink placer's first tier is the core placer on it (no tray to close first)."""
        if -1 not in self._derived:
            topo = self.topology
            specs = [
                NodeSpec(
                    topo.node_names[n],
                    topo.node_gpu_count[n],
                    topo.node_gpu_memory_gb[n],
                    tuple(topo.domain_names[up][topo.domain_of[up][n]] for up in range(1, topo.top + 1)),
                )
                for n in self.single_nodes
            ]
            self._derived[-1] = Topology.from_nodes(specs, topo.levels)
        return self._derived[-1]

    def derived(self, unit: int) -> Topology:
        """The clique topology counted in units of ``unit`` GPUs (which must divide every tray's GPUs)."""
        if unit not in self._derived:
            self._derived[unit] = _derived(self.topology, self.level, self.cliques, self.tray_nodes, unit)
        return self._derived[unit]

    def clique_of(self, node: int) -> int | None:
        """Index i of the multi-node clique holding ``node``, or None for a node that is its own domain."""
        return self.position.get(self.topology.domain_of[self.level][node])

    @property
    def clique_trays(self) -> tuple[int, ...]:
        return tuple(n for trays in self.tray_nodes for n in trays)


def clique_index(topology: Topology) -> CliqueIndex:
    """The topology's cliques, computed once and kept with the topology."""
    cached = topology.__dict__.get("_clique_index")
    if isinstance(cached, CliqueIndex):
        return cached
    level = topology.nvlink_level
    members: dict[int, list[int]] = {}
    if level > 0:
        for node, dom in enumerate(topology.domain_of[level]):
            members.setdefault(dom, []).append(node)
    cliques = tuple(sorted(d for d, nodes in members.items() if len(nodes) > 1))
    trays = tuple(tuple(members[d]) for d in cliques)
    tray_gpus = []
    for dom, nodes in zip(cliques, trays, strict=True):
        counts = {topology.node_gpu_count[n] for n in nodes}
        if len(counts) != 1:
            name = topology.domain_names[level][dom]
            raise InvalidRequest(f"the trays of NVLink domain {name!r} have different GPU counts {sorted(counts)}")
        tray_gpus.append(counts.pop())
    in_clique = {n for nodes in trays for n in nodes}
    index = CliqueIndex(
        topology=topology,
        level=level,
        cliques=cliques,
        tray_nodes=trays,
        tray_gpus=tuple(tray_gpus),
        position={d: i for i, d in enumerate(cliques)},
        single_nodes=tuple(n for n in range(topology.num_nodes) if n not in in_clique),
    )
    topology.__dict__["_clique_index"] = index
    return index


def _derived(
    topology: Topology, level: int, cliques: tuple[int, ...], trays: tuple[tuple[int, ...], ...], unit: int
) -> Topology:
    """One node per clique (its GPUs / ``unit``), the clique's level as the node level, the levels above as is."""
    specs = []
    for dom, nodes in zip(cliques, trays, strict=True):
        first = nodes[0]
        above = tuple(
            topology.domain_names[up][topology.domain_of[up][first]] for up in range(level + 1, topology.top + 1)
        )
        specs.append(
            NodeSpec(
                topology.domain_names[level][dom],
                sum(topology.node_gpu_count[n] for n in nodes) // unit,
                min(topology.node_gpu_memory_gb[n] for n in nodes),
                above,
            )
        )
    levels = [Level(topology.levels[level].name, topology.levels[level].bandwidth_gbps)]
    levels += list(topology.levels[level + 1 :])
    return Topology.from_nodes(specs, levels)


def nvlink_never_fits(topology: Topology, job: JobSpec, allowed: frozenset[int] | None = None) -> list[str]:
    """Why the job could not fit even an empty cluster (empty: it could), counting only ``allowed`` nodes:
    a TP group fits a node-domain node's GPUs, or whole trays of one clique (TP a multiple of the tray's
    GPUs when larger than a tray)."""
    index = clique_index(topology)
    if allowed is None:
        key = (job.tp, job.memory_per_gpu_gb, job.num_groups)
        if key not in index._verdicts:
            index._verdicts[key] = _never_fits(index, job, None)
        return list(index._verdicts[key])
    return _never_fits(index, job, allowed)


def _never_fits(index: CliqueIndex, job: JobSpec, allowed: frozenset[int] | None) -> list[str]:
    topology = index.topology
    t, mem = job.tp, job.memory_per_gpu_gb
    counts, memory = topology.node_gpu_count, topology.node_gpu_memory_gb

    def ok(n: int) -> bool:
        return (allowed is None or n in allowed) and memory[n] >= mem

    capacity = sum(counts[n] // t for n in index.single_nodes if ok(n))
    largest = max((counts[n] for n in index.single_nodes if ok(n)), default=0)
    for i, trays in enumerate(index.tray_nodes):
        g = index.tray_gpus[i]
        usable = sum(1 for n in trays if ok(n))
        if t > g and t % g:
            continue
        largest = max(largest, usable * g)
        capacity += usable * g // t
    if t > largest:
        sizes = sorted(set(index.tray_gpus))
        return [
            f"needs {t} GPUs in one NVLink domain for each TP group (a node, or whole trays of {sizes} GPUs of one"
            f" clique); the largest {'eligible ' if allowed is not None else ''}domain that takes such groups has"
            f" {largest}"
        ]
    if mem > max((memory[n] for n in range(topology.num_nodes) if allowed is None or n in allowed), default=0.0):
        return [f"needs {mem:g} GB per GPU; no eligible GPU has that much"]
    if capacity < job.num_groups:
        return [f"needs {job.num_groups} TP groups of {t} GPUs; even empty, the NVLink domains hold only {capacity}"]
    return []


def nvl72_topology(
    racks: int,
    hgx_nodes: int = 0,
    *,
    racks_per_spine: int = 16,
    nvlink_gbps: float = 900.0,
    network_gbps: float = 50.0,
    spine_gbps: float = 25.0,
) -> Topology:
    """GB200 NVL72 racks (18 trays of 4 GPUs, one clique each) and optionally HGX nodes of 8 GPUs.

    Levels: node (tray), clique (the rack: its NVLink fabric), spine (``racks_per_spine`` racks on one
    InfiniBand leaf group), cluster. An HGX node is its own clique; HGX nodes share spines of 4. One
    bandwidth per level: an HGX node's NVLink is priced at the trays' figure, a simplification that leaves
    the ranking among HGX layouts unchanged."""
    specs: list[NodeSpec] = []
    for r in range(racks):
        above = (f"clique-{r}", f"spine-{r // racks_per_spine}", "cluster")
        specs.extend(NodeSpec(f"rack-{r}-tray-{t}", 4, 186.0, above, "NVIDIA-GB200") for t in range(18))
    for h in range(hgx_nodes):
        above = (f"hgx-{h}", f"hgx-spine-{h // 4}", "cluster")
        specs.append(NodeSpec(f"hgx-{h}", 8, 80.0, above, "NVIDIA-H100-80GB-HBM3"))
    levels = [
        Level("node", nvlink_gbps),
        Level("clique", nvlink_gbps),
        Level("spine", network_gbps),
        Level("cluster", spine_gbps),
    ]
    return Topology.from_nodes(specs, levels, nvlink_level=1)

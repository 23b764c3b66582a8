"""The cluster's GPU map (pure): every node by topology domain, every GPU free, used (by which job),
degraded, unhealthy or drained, built from raw Node, Pod and ParallelJob objects.

Nothing is parsed here that the operator does not parse itself: nodes, pods and jobs go through
``paralleljob.k8s`` (``parse_node``, ``parse_pod``, ``parse_job``) and the occupancy through the operator's
own ``build_view``, so the map shows the cluster exactly as the scheduler sees it. The agent's detail
annotations (``gpu-health``, ``drained-gpus``) only add *why* a GPU is out. When ResourceSlices and
ResourceClaims are given, DRA nodes are overlaid as the operator overlays them (``k8s/edge/parse/dra.py``), and each of
their GPUs shows its device name and UUID.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from paralleljob.agent.signals import DRAINED_GPUS_ANNOTATION, GPU_HEALTH_ANNOTATION, parse_health_detail
from paralleljob.agent.signals import parse_index_list as parse_drained
from paralleljob.core.cluster import GPUHealth
from paralleljob.core.topology import Topology
from paralleljob.k8s.edge.config import DraConfig, TopologyConfig
from paralleljob.k8s.edge.constants import GPU_HEALTHY_CONDITION
from paralleljob.k8s.edge.parse.dra import NodeGpus, node_gpus, overlay_nodes, parse_claim, parse_slice
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.edge.parse.specs import JobObject, parse_job
from paralleljob.k8s.plan.decide import claims_of
from paralleljob.k8s.plan.slices.book import recorded
from paralleljob.k8s.plan.slices.mpsbook import shares_on
from paralleljob.k8s.plan.slices.poolbook import foreign_use, pool_nodes, recorded_use
from paralleljob.k8s.view.clusterview import (
    MPS_PREFIX,
    PLACEHOLDER_PREFIX,
    SLICED_PREFIX,
    ClusterView,
    build_view,
    is_mps_holder,
    is_sliced_holder,
)

# Holders that are not ParallelJobs: a pod no job explains, a DRA node's devices in others' claims, or a GPU
# that MIG slices or MPS shares of several jobs share (``GpuCell.slices`` names them).
OTHERS = ("pod:", "claims:", SLICED_PREFIX, MPS_PREFIX)
# What a GPU cell shows, from best to worst.
FREE, USED, CLOSED, DEGRADED, DRAINED, UNHEALTHY = "free", "used", "closed", "degraded", "drained", "unhealthy"


@dataclass(frozen=True)
class GpuCell:
    index: int
    state: str  # one of the names above
    holder: str | None = None  # job key (ns/name), "pod:ns/name" for a pod no ParallelJob explains, or
    # "claims:<node>" for devices of a DRA node allocated in claims the operator did not make
    reason: str = ""
    device: str = ""  # on a DRA node: the device name in the pool (what a claim names) ...
    uuid: str = ""  # ... and its UUID
    # a GPU MIG slices share: "<job key> <profile>@<start>" each, by start; MPS shares: "<job key> <percent>%"
    slices: tuple[str, ...] = ()


def sharing_kind(cell: GpuCell) -> str:
    """What shares the cell's GPU: "MPS" (an ``mps:`` holder) or "MIG"."""
    return "MPS" if cell.holder is not None and is_mps_holder(cell.holder) else "MIG"


@dataclass(frozen=True)
class NodeRow:
    name: str
    domain: str  # the lowest real topology domain above the node, named by its whole path
    ready: bool
    schedulable: bool
    why_closed: str
    condition: str  # GPUHealthy: "", "True" or "False"
    gpus: tuple[GpuCell, ...]
    level: str = ""  # the topology level ``domain`` is at (leaf, clique, ... or cluster)


@dataclass(frozen=True)
class PoolRow:
    """A device-plugin node offering MIG slices (``nvidia.com/mig-<profile>``): per profile, how many it offers
    and how many pods hold; ``slices``: "<job key> <profile> x<n>" of the operator's jobs. Which GPU each slice
    is on is the device plugin's choice, so no GPU cell names them."""

    name: str
    config: str  # nvidia.com/mig.config
    closed: str  # why it takes no new slice ("" when it does)
    offered: dict[str, int]
    held: dict[str, int]
    slices: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobRow:
    key: str
    phase: str
    shape: str
    gpus: int
    nodes: tuple[str, ...]
    cost_ms: float | None


@dataclass(frozen=True)
class GpuMap:
    domain_level: str  # the topology's lowest level above the node; each row's ``level`` says where it is grouped
    nodes: tuple[NodeRow, ...]
    jobs: tuple[JobRow, ...]
    warnings: tuple[str, ...] = ()
    totals: dict[str, int] = field(default_factory=dict)
    pools: tuple[PoolRow, ...] = ()  # device-plugin MIG nodes (their MIG GPUs are in no row above)

    def by_domain(self) -> dict[str, list[NodeRow]]:
        out: dict[str, list[NodeRow]] = {}
        for row in self.nodes:
            out.setdefault(row.domain, []).append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def job_order(gpu_map: GpuMap) -> dict[str, int]:
    """Each ParallelJob holding GPUs, numbered in key order: the one colour/letter assignment the terminal
    map (a letter per job) and the web view (a colour per job) share, so both name a job the same way."""
    return number_jobs(c.holder for r in gpu_map.nodes for c in r.gpus if c.holder)


def number_jobs(holders: Iterable[str]) -> dict[str, int]:
    """``job_order`` from the holders of GPUs (any order, repeats allowed)."""
    return {holder: i for i, holder in enumerate(sorted({h for h in holders if not h.startswith(OTHERS)}))}


def _job_row(job: JobObject) -> JobRow:
    record = job.record
    shape = f"{record.tp}x{record.pp}x{record.dp}" if record else ""
    if not shape and job.request is not None:
        shape = f"{job.request.spec.tp}x{job.request.spec.pp}x{job.request.spec.dp}"
    cost = (job.status.raw.get("communicationCost") or {}).get("totalMs")
    return JobRow(
        key=job.key,
        phase=job.phase.value,
        shape=shape,
        gpus=record.num_gpus if record else (job.request.spec.num_gpus if job.request else 0),
        nodes=tuple(record.nodes) if record else (),
        cost_ms=float(cost) if isinstance(cost, int | float) else None,
    )


@dataclass(frozen=True)
class DraObjects:
    """The DRA objects a map reads (ResourceSlices and ResourceClaims, as bodies) and the operator's DRA
    settings; none: no DRA node has GPUs in the map."""

    slices: Iterable[Mapping[str, Any]] = ()
    claims: Iterable[Mapping[str, Any]] = ()
    config: DraConfig = field(default_factory=DraConfig)


def build_map(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    config: TopologyConfig | None = None,
    dra_objects: DraObjects | None = None,
) -> GpuMap:
    return build_map_and_view(nodes, pods, jobs, config, dra_objects)[0]


def build_map_and_view(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    config: TopologyConfig | None = None,
    dra_objects: DraObjects | None = None,
) -> tuple[GpuMap, ClusterView]:
    """The map and the operator's cluster view it was read from (the web view measures jobs' traffic on
    the view's topology)."""
    config = config or TopologyConfig()
    dra_objects = dra_objects or DraObjects()
    dra, slices, claims = dra_objects.config, dra_objects.slices, dra_objects.claims
    raw_nodes = {str((n.get("metadata") or {}).get("name", "")): n for n in nodes}
    parsed_slices = [parse_slice(body) for body in slices]
    infos = overlay_nodes(
        [parse_node(body, config) for body in raw_nodes.values()],
        parsed_slices,
        [parse_claim(body) for body in claims],
        dra,
        config.default_gpu_memory_gib,
    )
    pools = node_gpus(parsed_slices, dra.driver) if dra.enabled else {}
    parsed_jobs = [parse_job(body) for body in jobs]
    parsed_pods = [parse_pod(p) for p in pods]
    view = build_view(infos, parsed_pods, claims_of(parsed_jobs), config)
    topology = view.topology
    level = topology.levels[1].name  # "cluster" for a cluster without GPU nodes
    rows = [node_row(view, n, raw_nodes.get(name), pools) for n, name in enumerate(topology.node_names)]
    totals = count_states(rows)
    job_rows = tuple(sorted((_job_row(j) for j in parsed_jobs), key=lambda r: r.key))
    warnings = (*view.warnings, *(f"{k}: {v}" for k, v in view.conflicts.items()))
    return GpuMap(level, tuple(rows), job_rows, tuple(warnings), totals, pool_rows(view, parsed_pods)), view


def pool_rows(view: ClusterView, pods: Iterable[PodInfo]) -> tuple[PoolRow, ...]:
    """The view's device-plugin MIG nodes as map rows: what each offers, what pods hold (the operator's records
    and every other pod asking for ``nvidia.com/mig-<profile>`` there), and whose slices they are."""
    if not view.pools:
        return ()
    held = [recorded_use(view), foreign_use(pods, view)]
    ours: dict[str, dict[tuple[str, str], int]] = {}
    for item in recorded(view):
        if not item.grant.exact:
            per = ours.setdefault(item.slot.node, {})
            per[(item.job, item.grant.profile)] = per.get((item.job, item.grant.profile), 0) + 1
    out = []
    for pool in pool_nodes(view, held):
        info = view.pools[pool.node]
        offer = info.mig
        out.append(
            PoolRow(
                name=pool.node,
                config=offer.config if offer is not None else "",
                closed=pool.closed,
                offered=dict(pool.offered),
                held=dict(pool.taken),
                slices=tuple(f"{job} {profile} x{n}" for (job, profile), n in sorted(ours.get(pool.node, {}).items())),
            )
        )
    return tuple(out)


def count_states(rows: Iterable[NodeRow]) -> dict[str, int]:
    totals = {s: 0 for s in (FREE, USED, CLOSED, DEGRADED, DRAINED, UNHEALTHY)}
    for row in rows:
        for cell in row.gpus:
            totals[cell.state] += 1
    totals["total"] = sum(totals.values())
    return totals


def node_row(
    view: ClusterView, n: int, body: Mapping[str, Any] | None, pools: Mapping[str, NodeGpus] | None = None
) -> NodeRow:
    """Node ``n`` of the view's topology as a map row; ``body`` is its Node (for the agent's detail
    annotations and the GPUHealthy condition; None for a ghost). The web view redoes only the rows of the
    nodes that changed with this, so both pictures are the same function of the same view."""
    topology, state = view.topology, view.state
    name = topology.node_names[n]
    info = view.nodes.get(name)
    annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
    detail = parse_health_detail(annotations.get(GPU_HEALTH_ANNOTATION))
    drained = parse_drained(annotations.get(DRAINED_GPUS_ANNOTATION))
    pool = (pools or {}).get(name) if info is not None and info.dra is not None else None
    cells = []
    for index, gpu in enumerate(topology.node_gpus(n)):
        owner = state.owner[gpu]
        agent = detail.get(index, {})
        reason = f"{agent.get('state', '')} {agent.get('reason', '')}".strip()
        if index in drained:
            cell = GpuCell(index, DRAINED, owner, "drained by an admin")
        elif state.health[gpu] in (GPUHealth.OFFLINE, GPUHealth.RESETTING):
            why = reason or (info.why_closed() if info is not None else f"node {name} is gone")
            cell = GpuCell(index, UNHEALTHY, owner, why or "reported unhealthy")
        elif state.health[gpu] is GPUHealth.DEGRADED or agent.get("state") == GPUHealth.DEGRADED.value:
            cell = GpuCell(index, DEGRADED, owner, reason)
        elif owner is not None:
            cell = GpuCell(index, USED, owner)
        elif not state.node_schedulable[n]:
            cell = GpuCell(index, CLOSED, None, info.why_closed() if info is not None else "")
        else:
            cell = GpuCell(index, FREE)
        if pool is not None and index < len(pool.devices):
            cell = replace(cell, device=pool.devices[index].name, uuid=pool.devices[index].uuid)
        if owner is not None and is_sliced_holder(owner):
            cell = replace(cell, slices=slices_on(view, name, index))
        elif owner is not None and is_mps_holder(owner):
            cell = replace(cell, slices=shares_on(view, name, index))  # the jobs whose MPS clients share it
        cells.append(cell)
    level, domain = home_domain(topology, n)
    return NodeRow(
        name=name,
        domain=domain,
        level=level,
        ready=info.ready if info is not None else False,
        schedulable=bool(state.node_schedulable[n]),
        why_closed=info.why_closed() if info is not None else f"node {name} is gone",
        condition=_condition(body),
        gpus=tuple(cells),
    )


def slices_on(view: ClusterView, node: str, index: int) -> tuple[str, ...]:
    """The MIG slices the operator's records place on GPU ``index`` of ``node``, by placement start."""
    found = [
        (r.grant.start or 0, f"{r.job} {r.grant}")
        for r in recorded(view)
        if r.slot.node == node and r.slot.gpu_indices == (index,)
    ]
    return tuple(text for _, text in sorted(found))


def home_domain(topology: Topology, n: int) -> tuple[str, str]:
    """(level, domain path) of node ``n``'s lowest real domain: levels the node has no label for hold a
    placeholder domain of its own, which would make one group per node (an HGX node on a cluster whose lowest
    level is the NVLink clique), so it groups at the first level it really belongs to (its leaf)."""
    for level in range(1, len(topology.levels)):
        name = topology.domain_names[level][topology.domain_of[level][n]]
        if not name.startswith(PLACEHOLDER_PREFIX):
            return topology.levels[level].name, name
    top = len(topology.levels) - 1
    return topology.levels[top].name, topology.domain_names[top][topology.domain_of[top][n]]


def _condition(body: Mapping[str, Any] | None) -> str:
    for condition in ((body or {}).get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == GPU_HEALTHY_CONDITION:
            return str(condition.get("status", ""))
    return ""

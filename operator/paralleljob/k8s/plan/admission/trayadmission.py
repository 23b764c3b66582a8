"""Admission over the trays of NVLink cliques (GB200/GB300 NVL72): the NVLink placer in the operator.

The view prices a clique as the network (``clusterview.priced_levels``): without a ComputeDomain the trays of
a rack reach each other over InfiniBand, and a job placed by the core placer keeps every TP group inside one
node. That stays the path for every job it can place, except that on a cluster with cliques a rigid job whose
TP groups fit the HGX nodes is placed on them alone first, so the cliques stay whole for larger TP groups.
A rigid job whose TP group is larger than a tray, and which the core placer cannot place, is placed by the
NVLink placer (``core/nvl72/nvlink``) on the *NVLink topology*: the view's nodes and GPU ids, the clique level priced
at its own (NVLink) bandwidth and named as the NVLink level, over the view's own state (``seen_as``). Such a
placement takes whole trays of cliques and is recorded as one pod per tray (``layout: trays``); the pods join
one ComputeDomain per clique (``podsync``), which is what makes the clique's bandwidth real. Its refusal names
cliques and their free trays, not the largest node. A pod group whose pods each take a whole tray
(``plan/groups/traygroups``) goes to the NVLink placer alone, inside one clique, and never to an HGX node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from paralleljob.core.cluster import Allocation, ClusterState, closed_nodes
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.nvl72.cliques import clique_index
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods
from paralleljob.core.placing.eligibility import FilteredPlacer, NodeFilter, never_fits
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import OPERATOR_PLACER
from paralleljob.core.timing.cost import CostModel, cost_model
from paralleljob.core.topology import Level, Topology
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.render.trayenv import tray_pod_name
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.edge.status.trayrecords import TraySlot
from paralleljob.k8s.plan.kinds.picker import may_take_trays, why_no_trays
from paralleljob.k8s.view.clusterview import ClusterView

TRAY_PLACER = OPERATOR_PLACER  # the same small exact-search budget as the operator's core placer


def nvlink_topology(view: ClusterView) -> Topology | None:
    """The view's topology with its NVLink level named and priced at NVLink bandwidth; None when the cluster
    has no multi-node clique (no label, or one tray per clique)."""
    if not view.nvlink_levels or view.topology.num_nodes == 0:
        return None
    names = [level.name for level in view.topology.levels]
    name, bandwidth = next(iter(view.nvlink_levels.items()))
    if name not in names[1:-1]:
        return None
    topology = _repriced(view.topology, names.index(name), bandwidth)
    return topology if clique_index(topology).cliques else None


def _repriced(topology: Topology, level: int, bandwidth: float) -> Topology:
    """Kept with the view's topology (hashing one of 100k GPUs on every call would cost more than placing)."""
    key = ("_nvlink_repriced", level, bandwidth)
    cached = topology.__dict__.get("_nvlink_repriced")
    if isinstance(cached, tuple) and cached[0] == key:
        return cached[1]  # type: ignore[no-any-return]
    levels = list(topology.levels)
    levels[level] = Level(levels[level].name, bandwidth)
    derived = replace(topology, levels=tuple(levels), nvlink_level=level)
    topology.__dict__["_nvlink_repriced"] = (key, derived)
    return derived


def admission_topology(view: ClusterView, request: JobRequest) -> Topology:
    """The topology "can this job ever fit" is judged on: the NVLink one when there are cliques and the job
    may take trays, so a TP group larger than every node is not refused when whole trays of a clique hold it
    (an elastic job or a pod group of one TP group per pod never takes trays: for them the node stays the
    limit)."""
    if not may_take_trays(request):
        return view.topology
    return nvlink_topology(view) or view.topology


def trays_refused(view: ClusterView, request: JobRequest, spec: JobSpec, node_filter: NodeFilter | None) -> list[str]:
    """Why a job that can never fit is not placed over the cluster's NVL72 trays when whole trays of a clique
    would hold it (its kind or sizing takes none): the refusal says that, not only that the nodes are too
    small. Empty when it may take trays, or they would not hold it either."""
    why = why_no_trays(request)
    topology = nvlink_topology(view) if why else None
    if topology is None or never_fits(topology, spec, node_filter):
        return []
    return [f"whole trays of an NVLink clique would hold it, but {why}"]


def wants_trays(view: ClusterView, request: JobRequest) -> Topology | None:
    """The NVLink topology when ``request`` may take whole trays: rigid, TP larger than the smallest clique's
    trays, and not a pod group unless its pods take whole trays."""
    if not may_take_trays(request):
        return None
    topology = nvlink_topology(view)
    if topology is None:
        return None
    index = clique_index(topology)
    return topology if request.tray_pod_gpus or request.spec.tp > min(index.tray_gpus) else None


@contextmanager
def seen_as(state: ClusterState, topology: Topology) -> Iterator[ClusterState]:
    """The view's own state read through ``topology`` for one decision: the same nodes, GPU ids and domains
    (the repriced topology shares the view's tuples), other bandwidths and the NVLink level. O(1), where
    copying the state onto it cost O(GPUs) per attempt (5.5-8.6 ms at 7,200 GPUs)."""
    original = state.topology
    if topology.domain_of is not original.domain_of or topology.gpu_node is not original.gpu_node:
        raise ValueError("a state can only be seen through a topology of the same nodes and domains")
    state.topology = topology
    try:
        yield state
    finally:
        state.topology = original


def place_on_trays(  # params: one NVLink placer question: what (request, key), on what (view, topology), where not
    view: ClusterView,
    topology: Topology,
    request: JobRequest,
    job_key: str,
    node_filter: NodeFilter | None = None,
    spares: int = 0,
    closed: Sequence[int] = (),
) -> Placement:
    """The NVLink placer's placement of ``request`` on the view (raises PlacementInfeasible with reasons that
    name cliques, and the filter's reasons when it has any, as ``FilteredPlacer`` gives them). Nodes the
    job's filter excludes, and ``closed``, are closed for the decision."""
    excluded: list[int] = list(closed)
    if node_filter is not None and node_filter.allowed is not None:
        excluded += [n for n in range(topology.num_nodes) if n not in node_filter.allowed]
    spec = replace(request.spec, job_id=job_key)
    try:
        with seen_as(view.state, topology) as state, closed_nodes(state, excluded):
            placer = NVLinkPlacer(state, TRAY_PLACER, spares, request.rank_order)
            return placer.place(spec, cost_model(request.cost_model))
    except PlacementInfeasible as exc:
        why = [w for w in (node_filter.why if node_filter is not None else ()) if w not in exc.reasons]
        if not why:
            raise
        raise PlacementInfeasible(exc.job_id, [*exc.reasons, *why], permanent=exc.permanent) from None


def spares_for(view: ClusterView, queue: QueueInfo | None) -> int:
    """Warm spare trays per clique a job of ``queue`` leaves free: the queue's setting, else the topology's."""
    return queue.nvlink_spares if queue is not None and queue.nvlink_spares is not None else view.nvlink_spares


def place_rigid(
    view: ClusterView,
    placer: FilteredPlacer,
    request: JobRequest,
    job_key: str,
    node_filter: NodeFilter | None,
    spares: int | None = None,
) -> Placement:
    """The core placer's placement when it places the job or the job cannot take trays; else the NVLink
    placer's (whose refusal, naming the cliques, is the one the job waits with). ``spares``: whole free
    trays per clique the job leaves alone (None: the topology setting)."""
    spares = view.nvlink_spares if spares is None else spares
    if request.tray_pod_gpus:
        return place_tray_group(view, request, job_key, node_filter, spares)
    hgx_first = _hgx_first(view, placer, request, node_filter)
    if hgx_first is not None:
        return hgx_first
    try:
        with closed_nodes(view.state, spare_trays(view, spares)):
            return placer.place(request.spec, cost_model(request.cost_model))
    except PlacementInfeasible:
        topology = wants_trays(view, request)
        if topology is None:
            raise
        return place_on_trays(view, topology, request, job_key, node_filter, spares)


def place_tray_group(
    view: ClusterView, request: JobRequest, job_key: str, node_filter: NodeFilter | None, spares: int
) -> Placement:
    """A pod group whose pods each take a whole tray (``plan/groups/traygroups``): the NVLink placer inside one clique
    (its pods name one channel claim template), the roomiest clique first, never on an HGX node (its pods
    hold only a slice of a TP group). The refusal is the roomiest clique's, and says why only one."""
    width, spec = request.tray_pod_gpus, request.spec
    topology = nvlink_topology(view)
    if topology is None:
        why = f"its pods take {width} GPUs each, a slice of a TP{spec.tp} group: it needs NVLink cliques of trays"
        raise PlacementInfeasible(job_key, [f"{why}, and this cluster has none"])
    index = clique_index(topology)
    fitting = [trays for i, trays in enumerate(index.tray_nodes) if index.tray_gpus[i] == width]
    if not fitting:
        sizes = ", ".join(str(g) for g in sorted(set(index.tray_gpus)))
        raise PlacementInfeasible(job_key, [f"its pods take {width} GPUs each, and the cliques' trays have {sizes}"])
    state = view.state
    fitting.sort(key=lambda trays: -sum(state.usable_free(n) == topology.node_gpu_count[n] for n in trays))
    every = [*index.single_nodes, *(n for trays in index.tray_nodes for n in trays)]
    refusals: list[PlacementInfeasible] = []
    for trays in fitting:
        inside = set(trays)
        try:
            closed = [n for n in every if n not in inside]
            return place_on_trays(view, topology, request, job_key, node_filter, spares, closed)
        except PlacementInfeasible as exc:
            refusals.append(exc)
    note = "a pod group on trays stays inside one clique: its pods name one ComputeDomain's channel template"
    raise PlacementInfeasible(job_key, [*refusals[0].reasons, note], permanent=refusals[0].permanent)


def _hgx_first(
    view: ClusterView, placer: FilteredPlacer, request: JobRequest, node_filter: NodeFilter | None
) -> Placement | None:
    """On a cluster with cliques, a job whose TP groups fit nodes outside them (HGX: the node is the NVLink
    domain) goes there while they have room, so the cliques stay whole for the TP groups only they hold
    (core/nvl72/nvlink's first tier, on the view). The job's own filter holds here as on every path: only the HGX
    nodes it admits count, and ``placer`` applies the rest of it. None: no cliques, no such room, or the
    placer refused."""
    topology = nvlink_topology(view)
    if topology is None or not may_take_trays(request):  # a pod group of whole-tray pods never comes here
        return None
    spec, state = request.spec, view.state
    index = clique_index(topology)
    hgx = [n for n in index.single_nodes if node_filter is None or node_filter.admits(n)]
    if sum(state.node_slots(n, spec.tp, spec.memory_per_gpu_gb) for n in hgx) < spec.num_groups:
        return None
    try:
        with closed_nodes(state, index.clique_trays):
            return placer.place(spec, cost_model(request.cost_model))
    except PlacementInfeasible:
        return None


def spare_trays(view: ClusterView, spares: int) -> list[int]:
    """The trays held as warm spares (``nvlinkSparesPerClique``): the last ``spares`` whole free trays of each
    clique, in node order, as core/nvl72/nvlink counts them; none without cliques or spares."""
    topology = nvlink_topology(view) if spares else None
    if topology is None:
        return []
    state, out = view.state, []
    for trays in clique_index(topology).tray_nodes:
        whole = [n for n in trays if state.usable_free(n) == topology.node_gpu_count[n]]
        out.extend(whole[-spares:])
    return out


def spans_trays(view: ClusterView, groups: Sequence[Sequence[int]]) -> bool:
    """Whether some TP group lies on more than one node (only the NVLink placer places so)."""
    gpu_node = view.topology.gpu_node
    return any(len({gpu_node[g] for g in group}) > 1 for group in groups)


def tray_record(
    view: ClusterView, job: JobObject, request: JobRequest, placement: Placement, epoch: int, reasons: Sequence[str]
) -> PlacementRecord:
    """The record of ``placement`` (its TP groups and cost) over whole trays: one pod per tray, in node-rank
    order, each naming its clique by the node's clique label (``NodeInfo.clique``: what the ComputeDomain
    serves); ``reasons``: the record's."""
    spec, topology = request.spec, view.topology
    trays = []
    for pod in tray_pods(topology, placement.groups, spec.tp, spec.pp, spec.dp, request.rank_order):
        node = topology.node_names[pod.node]
        info = view.nodes.get(node)
        clique = (info.clique if info is not None else None) or pod.clique
        first = topology.node_first_gpu[pod.node]
        indices = tuple(g - first for g in pod.gpus)
        trays.append(TraySlot(tray_pod_name(job.name, pod), node, indices, pod.node_rank, clique, epoch))
    return PlacementRecord(
        epoch,
        request.cost_model,
        spec.tp,
        spec.pp,
        spec.dp,
        (),
        rank_order=request.rank_order,
        cost=placement.cost,
        reasons=tuple(reasons),
        trays=tuple(trays),
    )


@dataclass(frozen=True)
class TrayAwarePlacer:
    """A placer for the core's queueing pass (``core.admit.admission.schedule``: fair share, backfill,
    preemption) that places as :func:`place_rigid` does, so a job larger than a tray takes whole trays there
    too. ``requests``: the pass's jobs by key (a spec's ``job_id``); a repair (``previous``) or a job the
    pass does not know goes to ``inner`` unchanged."""

    view: ClusterView
    inner: FilteredPlacer
    requests: Mapping[str, JobRequest]
    filter_for: Callable[[JobSpec], NodeFilter | None]
    queues: Mapping[str, QueueInfo]

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        request = self.requests.get(job.job_id)
        if request is None or previous is not None:
            return self.inner.place(job, model, previous)
        request = replace(request, spec=job)  # the size the pass asks about (an elastic job's, say)
        spares = spares_for(self.view, self.queues.get(request.queue))
        return place_rigid(self.view, self.inner, request, job.job_id, self.filter_for(job), spares)

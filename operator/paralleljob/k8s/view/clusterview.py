"""The cluster as the core sees it, rebuilt from what the API shows: nodes, pods and recorded placements.

Rebuilding (instead of patching a long-lived state) is what makes the operator level-triggered: whatever
happened while it was away, the next view is derived from the objects alone. The order matters:
1. topology from the GPU nodes, plus *ghost* nodes that recorded placements still name after the Node
   object is gone (so the job's allocation can be loaded and its groups found broken); with
   ``pcieRootBandwidthGbps`` set, a DRA node's GPUs are grouped by PCIe root in a level below the node;
2. every recorded placement is allocated (the operator's own claims); a record of MIG slices holds each of
   its GPUs by a ``sliced:`` holder instead, shared by every job with a slice there (``load_slices``);
3. bound pods the records do not explain — other schedulers' GPU pods, our stale workers — take GPUs too,
   and so do DRA devices allocated in other ResourceClaims (``NodeInfo.held_gpus``, see ``dra.py``);
4. only then health and schedulability are applied, so broken hardware under a job shows up as broken
   GPUs *owned by that job*, which is exactly what the core's recovery looks for.
Domains are named by their whole path to the top (``leaf-01/spine-00/zone-0``), so inconsistent labels can
only split a domain, never make the tree invalid.

The reconciler keeps one view alive between passes and patches it (``liveview.py``); steps 2-4 are written
per claim, per pod and per node here so that both paths run the very same code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.topology import Level, NodeSpec, Topology
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, record_groups
from paralleljob.k8s.edge.status.trayrecords import TraySlot

CLUSTER_DOMAIN = "cluster"
# A node without a label for a level gets a domain of its own there, named "~<node>/...": a placeholder, not
# a real switch or clique (surfaces that group nodes skip such levels, see clitools.gpumap.node_row).
PLACEHOLDER_PREFIX = "~"
PCIE_ROOT_LEVEL = "pcieRoot"  # the optional level below the node (TopologyConfig.pcie_root_bandwidth_gbps)


@dataclass(frozen=True, slots=True)
class Claim:
    """A recorded placement to load into the view: whose it is and where its pods belong."""

    key: str  # namespace/name of the ParallelJob
    uid: str
    record: PlacementRecord


@dataclass
class ClusterView:
    topology: Topology  # Topology.empty() when there are no GPU nodes (and no recorded ones)
    state: ClusterState
    nodes: dict[str, NodeInfo]
    node_index: dict[str, int]
    products: list[str]
    ghosts: frozenset[str]
    conflicts: dict[str, str] = field(default_factory=dict)  # job key -> why its record could not be loaded
    loaded: dict[str, Claim] = field(default_factory=dict)  # job key -> its claim, holding its GPUs
    occupants: dict[str, list[str]] = field(default_factory=dict)  # node -> pods not explained by a record
    node_warnings: dict[str, list[str]] = field(default_factory=dict)  # node -> what is wrong with it
    # NVLink-domain levels present (the clique: name -> its own bandwidth, which ``priced_levels`` lowers to
    # the network's until a ComputeDomain is used; plan/admission/trayadmission prices it so for whole-tray jobs)
    nvlink_levels: dict[str, float] = field(default_factory=dict)
    nvlink_spares: int = 0  # whole free trays per clique that take no new gang (TopologyConfig)
    # Device-plugin nodes that offer MIG slices as nvidia.com/mig-<profile> (``NodeInfo.mig``), whole GPUs or
    # not: a node whose every GPU is in MIG mode has no nvidia.com/gpu, so it is in no topology
    pools: dict[str, NodeInfo] = field(default_factory=dict)
    # The ``sliced:``, ``mps:`` and ``claims:`` holders assumed on this view, in the order first assumed (some
    # may have been given back since): what the gauges and waiting messages read them from, as the view may
    # hold a ``pod:`` holder for every pod no record explains (tens of thousands on a shared cluster)
    named_holders: dict[str, None] = field(default_factory=dict)

    def assume_named(self, holder: str, gpus: tuple[int, ...]) -> None:
        self.state.assume(holder, gpus)
        self.named_holders[holder] = None

    def named(self, is_kind: Callable[[str], bool]) -> Iterator[tuple[str, tuple[int, ...]]]:
        """The named holders ``is_kind`` picks that hold GPUs now, with their GPUs."""
        assumed = self.state.assumed
        for holder in self.named_holders:
            gpus = assumed.get(holder)
            if gpus and is_kind(holder):
                yield holder, gpus

    @property
    def warnings(self) -> list[str]:
        return [warning for found in self.node_warnings.values() for warning in found]

    @property
    def empty(self) -> bool:
        """No GPU nodes: admission waits for some (NoGPUNodes) instead of refusing every job for good."""
        return self.topology.num_nodes == 0

    def gpu_id(self, node: str, index: int) -> int | None:
        if node not in self.node_index:
            return None
        n = self.node_index[node]
        if not 0 <= index < self.topology.node_gpu_count[n]:
            return None
        return self.topology.node_first_gpu[n] + index

    def slot_gpus(self, slot: PodSlot | TraySlot) -> tuple[int, ...] | None:
        ids = [self.gpu_id(slot.node, i) for i in slot.gpu_indices]
        if any(g is None for g in ids):
            return None
        return tuple(g for g in ids if g is not None)

    def locate(self, gpus: Sequence[int]) -> tuple[str, tuple[int, ...]]:
        """Global GPU ids of one TP group -> (node name, GPU indices on that node)."""
        node = self.topology.gpu_node[gpus[0]]
        first = self.topology.node_first_gpu[node]
        return self.topology.node_names[node], tuple(g - first for g in gpus)

    def broken_gpus(self, slot: PodSlot) -> bool:
        """True when any GPU of the slot is gone or may not run work."""
        ids = self.slot_gpus(slot)
        if ids is None:
            return True
        return any(self.state.health[g] in (GPUHealth.OFFLINE, GPUHealth.RESETTING) for g in ids)


def _domains(values: Sequence[str | None], node: str) -> tuple[str, ...]:
    """Path names bottom-up: the domain at each level is named by its own value and every value above it."""
    parts = [v if v else f"{PLACEHOLDER_PREFIX}{node}" for v in values]
    named = tuple("/".join(parts[i:]) for i in range(len(parts)))
    return (*named, CLUSTER_DOMAIN)


@functools.lru_cache(maxsize=16)
def _topology(specs: tuple[NodeSpec, ...], levels: tuple[Level, ...], sub_level: Level | None) -> Topology:
    return Topology.from_nodes(specs, levels, sub_level)


def _pcie_roots(info: NodeInfo, config: TopologyConfig) -> tuple[str, ...]:
    """A DRA node's GPUs grouped by PCIe root, when that level is on and every device names its root."""
    if not config.pcie_root_bandwidth_gbps or info.dra is None:
        return ()
    roots = info.dra.pcie_roots
    return roots if len(roots) == info.gpu_count and all(roots) else ()


def priced_levels(config: TopologyConfig, present: Sequence[int]) -> tuple[Level, ...]:
    """The topology's levels with the bandwidth a job really gets at each: an NVLink-domain level (the
    clique) is priced as the next present level above it, since without a ComputeDomain the trays of a
    clique reach each other over the network, not NVLink (the clique still groups them as a locality)."""
    above = [*(config.levels[i].bandwidth_gbps for i in present), config.cluster_bandwidth_gbps]
    middle = []
    for k, i in enumerate(present):
        source = config.levels[i]
        bandwidth = min(source.bandwidth_gbps, above[k + 1]) if source.nvlink_domain else source.bandwidth_gbps
        middle.append(Level(source.name, bandwidth))
    return (Level("node", config.node_bandwidth_gbps), *middle, Level(CLUSTER_DOMAIN, config.cluster_bandwidth_gbps))


def build_view(
    nodes: Iterable[NodeInfo], pods: Iterable[PodInfo], claims: Sequence[Claim], config: TopologyConfig
) -> ClusterView:
    """The cluster view; ``claims`` in the order they were made (older claims win a contested GPU)."""
    nodes = list(nodes)
    live = {n.name: n for n in nodes if n.gpu_count > 0}
    pools = {n.name: n for n in nodes if is_pool(n)}
    ghost_counts: dict[str, int] = {}
    ghost_cliques: dict[str, str] = {}  # a gone tray -> the NVLink clique its record says it was in
    for claim in claims:
        for slot in claim.record.pod_slots:
            if slot.node not in live and slot.gpu_indices:
                ghost_counts[slot.node] = max(ghost_counts.get(slot.node, 0), max(slot.gpu_indices) + 1)
                if isinstance(slot, TraySlot):
                    ghost_cliques[slot.node] = slot.clique
    # A gone tray stays in its clique (the domains of a live tray of the same clique), so a repair replaces it
    # inside that clique, where the job's ComputeDomain is; without a live peer it is alone.
    peers: dict[str | None, NodeInfo] = {info.clique: info for info in live.values() if info.clique}
    if not live and not ghost_counts:
        view = empty_view(pools)
        for claim in claims:
            if claim.record.pooled:
                load_claim(view, claim)
        return view
    present = [i for i, _ in enumerate(config.levels) if any(n.domains[i] for n in live.values())]
    levels = priced_levels(config, present)
    specs = []
    for name in sorted(set(live) | set(ghost_counts)):
        info = live.get(name)
        if info is not None:
            values = [info.domains[i] for i in present]
            domains = _domains(values, name)
            roots = _pcie_roots(info, config)
            specs.append(NodeSpec(name, info.gpu_count, info.gpu_memory_gib, domains, info.gpu_product, roots))
        elif (peer := peers.get(ghost_cliques.get(name))) is not None:
            domains = _domains([peer.domains[i] for i in present], name)
            specs.append(NodeSpec(name, ghost_counts[name], peer.gpu_memory_gib, domains, peer.gpu_product))
        else:
            specs.append(
                NodeSpec(name, ghost_counts[name], config.default_gpu_memory_gib, _domains([None] * len(present), name))
            )
    # The level below the node exists as soon as one node has roots; a node without them is one domain.
    sub_level = Level(PCIE_ROOT_LEVEL, config.pcie_root_bandwidth_gbps) if any(s.gpu_domains for s in specs) else None
    topology = _topology(tuple(specs), levels, sub_level)
    state = ClusterState(topology)
    view = ClusterView(
        topology,
        state,
        live,
        {name: i for i, name in enumerate(topology.node_names)},
        [spec.gpu_product for spec in specs],
        frozenset(ghost_counts),
        nvlink_levels={
            config.levels[i].name: config.levels[i].bandwidth_gbps for i in present if config.levels[i].nvlink_domain
        },
        nvlink_spares=config.nvlink_spares_per_clique,
        pools=pools,
    )
    for claim in claims:
        load_claim(view, claim)
    on_node: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if pod.holds_gpus:
            on_node.setdefault(pod.node, []).append(pod)
    for name, held in on_node.items():
        occupy_node(view, name, held)
    for name in live:
        hold_claimed_devices(view, name)
    for n in range(topology.num_nodes):
        apply_health(view, n)
    return view


def empty_view(pools: dict[str, NodeInfo] | None = None) -> ClusterView:
    """The view of a cluster without whole-GPU nodes: an empty topology and state, never None (``pools``:
    its device-plugin MIG nodes, if any)."""
    topology = Topology.empty()
    return ClusterView(topology, ClusterState(topology), {}, {}, [], frozenset(), pools=pools or {})


def is_pool(info: NodeInfo) -> bool:
    """A device-plugin node offering MIG slices (``ClusterView.pools``)."""
    return info.mig is not None and info.mig.api == "device-plugin"


def apply_health(view: ClusterView, n: int) -> None:
    """Step 4 for one node, on a node whose GPUs are all healthy and which is schedulable: a ghost is
    wholly offline, a live node gets its broken GPUs offline, its degraded ones degraded, and no new work
    if it takes none."""
    state, topology = view.state, view.topology
    info = view.nodes.get(topology.node_names[n])
    broken = frozenset(range(topology.node_gpu_count[n])) if info is None else info.broken_gpus()
    first = topology.node_first_gpu[n]
    for index in broken:
        state.set_health(first + index, GPUHealth.OFFLINE)
    if info is not None:
        for index in info.degraded_gpus - broken:
            state.set_health(first + index, GPUHealth.DEGRADED)
    if info is None or not info.takes_new_work:
        state.set_node_schedulable(n, False)


def load_claim(view: ClusterView, claim: Claim) -> bool:
    """Step 2 for one claim: all of its GPUs, or none and the reason in ``conflicts``."""
    if claim.record.sliced:
        return load_slices(view, claim)
    if claim.record.shared:
        return load_shares(view, claim)
    groups = []
    for slot in claim.record.pod_slots:
        if view.slot_gpus(slot) is None:
            view.conflicts[claim.key] = f"pod {slot.name} is recorded on GPUs {slot.gpu_names()} that do not exist"
            return False
    for names in record_groups(claim.record):
        ids = [view.gpu_id(node, int(index)) for node, _, index in (name.rpartition("/") for name in names)]
        groups.append(tuple(g for g in ids if g is not None))
    taken = [g for group in groups for g in group if view.state.owner[g] is not None]
    if taken:
        owner = view.state.owner[taken[0]]
        view.conflicts[claim.key] = f"GPU {taken[0]} is recorded for this job and for {owner}"
        return False
    try:
        # Memory is not re-checked for a placement already made: a relabelled node must not evict a job.
        view.state.allocate(Allocation(claim.key, tuple(groups), 0.0))
    except InvalidRequest as exc:
        view.conflicts[claim.key] = str(exc)
        return False
    view.loaded[claim.key] = claim
    return True


def load_slices(view: ClusterView, claim: Claim) -> bool:
    """Step 2 for a claim of MIG slices: their GPUs are held by one ``sliced:`` holder each, never by the job,
    since several jobs share a sliced GPU (which slices are there is read from the loaded records,
    ``plan/slices/book.py``). A GPU another claim owns whole is a conflict, as for any record. Slices the
    device plugin picks name no GPU: nothing is held, the record alone counts them (``book.pool_nodes``)."""
    if claim.record.pooled:
        view.loaded[claim.key] = claim
        return True
    return _load_held(view, claim, is_sliced_holder, "MIG slices", "whole", hold_slice)


def load_shares(view: ClusterView, claim: Claim) -> bool:
    """Step 2 for a claim of MPS shares: each GPU held by one ``mps:`` holder, shared by every job with a
    share there (which shares, from the loaded records: ``plan/slices/mpsbook.py``); a GPU another claim owns
    otherwise is a conflict."""
    return _load_held(view, claim, is_mps_holder, "MPS shares", "", hold_share)


def _load_held(
    view: ClusterView,
    claim: Claim,
    shared: Callable[[str], bool],
    what: str,
    how: str,
    hold: Callable[[ClusterView, str, int], None],
) -> bool:
    """Each slot's one GPU held by ``hold`` (its shared holder), or the claim a conflict: a GPU that does not
    exist, or one an owner that ``shared`` does not accept holds (``how`` it holds it, for the message)."""
    gpus = []
    for slot in claim.record.slots:
        gpu = view.gpu_id(slot.node, slot.gpu_indices[0]) if len(slot.gpu_indices) == 1 else None
        if gpu is None:
            view.conflicts[claim.key] = f"pod {slot.name} is recorded on GPUs {slot.gpu_names()} that do not exist"
            return False
        owner = view.state.owner[gpu]
        if owner is not None and not shared(owner):
            view.conflicts[claim.key] = f"GPU {gpu} is recorded for this job's {what} and for {owner} {how}".rstrip()
            return False
        gpus.append((slot.node, slot.gpu_indices[0]))
    for node, index in gpus:
        hold(view, node, index)
    view.loaded[claim.key] = claim
    return True


MPS_PREFIX = "mps:"


def is_mps_holder(owner: str) -> bool:
    """The holder of a GPU that MPS shares of the operator's records are on (``mps:<node>/<index>``)."""
    return owner.startswith(MPS_PREFIX)


def hold_share(view: ClusterView, node: str, index: int) -> None:
    """GPU ``index`` of ``node`` has an MPS share now: held by its ``mps:`` holder, never offered whole."""
    gpu = view.gpu_id(node, index)
    if gpu is not None and view.state.owner[gpu] is None:
        view.assume_named(f"{MPS_PREFIX}{node}/{index}", (gpu,))


SLICED_PREFIX = "sliced:"


def sliced_holder_id(node: str, index: int) -> str:
    """The holder of a GPU that MIG slices of the operator's records are on (one per GPU)."""
    return f"{SLICED_PREFIX}{node}/{index}"


def is_sliced_holder(owner: str) -> bool:
    return owner.startswith(SLICED_PREFIX)


def hold_slice(view: ClusterView, node: str, index: int) -> None:
    """GPU ``index`` of ``node`` has a slice now: held by its ``sliced:`` holder (once), so no whole-GPU job
    gets it. Its slices leave with the records that place them: the next pass's view rebuilds without them."""
    gpu = view.gpu_id(node, index)
    if gpu is not None and view.state.owner[gpu] is None:
        view.assume_named(sliced_holder_id(node, index), (gpu,))


def explained(pod: PodInfo, loaded: dict[str, Claim]) -> bool:
    """True when a loaded claim already holds this pod's GPUs: same job, same slot, same node and GPUs (for
    a pod group's pod: any slot of its adopting job's record on that node with those GPUs)."""
    if pod.group is not None:
        group_claim = loaded.get(object_key(pod.namespace, pod.group))
        return group_claim is not None and any(
            s.node == pod.node and s.gpu_indices == pod.gpu_indices for s in group_claim.record.slots
        )
    claim = loaded.get(object_key(pod.namespace, pod.job)) if pod.job is not None else None
    if claim is None or claim.uid != pod.owner_uid:
        return False
    slot = next((s for s in claim.record.pod_slots if s.name == pod.name), None)
    return slot is not None and slot.node == pod.node and slot.gpu_indices == pod.gpu_indices


def hold_claimed_devices(view: ClusterView, name: str) -> None:
    """Step 3b for one DRA node: GPUs that other ResourceClaims have allocated (``NodeInfo.held_gpus``) are
    taken by one assumed holder per node (``claims:<node>``); a GPU already owned (a record or a pod claims
    it too) is left to that owner."""
    info = view.nodes.get(name)
    if info is None or not info.held_gpus:
        return
    gpus = [gpu for i in sorted(info.held_gpus) if (gpu := view.gpu_id(name, i)) is not None]
    free = tuple(g for g in gpus if view.state.owner[g] is None)
    view.assume_named(claims_holder_id(name), free)


def claims_holder_id(node: str) -> str:
    """The assumed holder of the GPUs of ``node`` that claims the operator does not explain hold."""
    return f"claims:{node}"


def occupy_node(view: ClusterView, name: str, pods: Iterable[PodInfo]) -> None:
    """Step 3 for one node: its GPU pods (in the stores' order) that no record explains take GPUs
    (``occupy``). The node is warned about only when a pod found too few free GPUs *and* the pods on the node
    themselves show it (``shown_oversubscribed``): after a restart the view holds a record's GPUs for pods
    that are not on the node yet (or any more), which keeps them from new work but gives no GPU twice."""
    pods = list(pods)
    notes = [note for pod in pods if not explained(pod, view.loaded) and (note := occupy(view, pod))]
    shown = shown_oversubscribed(view, name, pods) if notes else ""
    if shown:
        view.node_warnings[name] = [f"{note}: {shown}" for note in notes]


def shown_oversubscribed(view: ClusterView, name: str, pods: Sequence[PodInfo]) -> str:
    """What the API shows wrong with the GPU pods bound to node ``name`` (being deleted or not: they run
    until gone): a GPU index in two pods' annotations, or more GPUs requested than the node has; else ''."""
    n = view.node_index.get(name)
    if n is None:
        return ""
    holders: dict[int, list[str]] = {}
    for pod in pods:
        for index in pod.gpu_indices or ():
            holders.setdefault(index, []).append(pod.key)
    twice = sorted(index for index, keys in holders.items() if len(keys) > 1)
    if twice:
        return f"GPU {twice[0]} is in pods {' and '.join(holders[twice[0]])}" + (
            f" ({len(twice)} GPUs held twice)" if len(twice) > 1 else ""
        )
    requested, has = sum(pod.gpus for pod in pods), view.topology.node_gpu_count[n]
    if requested > has:
        return f"its pods ({', '.join(pod.key for pod in pods)}) request {requested} GPUs, it has {has}"
    return ""


def occupy(view: ClusterView, pod: PodInfo) -> str:
    """Step 3 for one pod no record explains: it holds its annotated GPUs when they are free, else any free
    ones (assumed usage of holder ``pod:<key>``, not an allocation). Returns a note when its node has
    fewer free GPUs than it holds (``occupy_node`` reports it only when the pods show it too).

    A stale pod of a job whose new record took the pod's own GPUs (a repair may reuse the job's GPUs while
    its old pods are still going away) holds nothing more: those GPUs are the job's either way, and no
    other GPU is taken for it. Counting it again made a node look oversubscribed on every pass of a repair.
    """
    n = view.node_index.get(pod.node)
    if n is None:
        return ""
    gpus = list(view.topology.node_gpus(n))
    free = [g for g in gpus if view.state.owner[g] is None]
    first = view.topology.node_first_gpu[n]
    annotated = [first + i for i in pod.gpu_indices or () if 0 <= i < len(gpus)]
    own_job = own_claim_key(pod, view.loaded)
    own = [g for g in annotated if own_job is not None and view.state.owner[g] == own_job]
    preferred = [g for g in annotated if g in free]
    if pod.deleting or own_job is not None:
        # Leaving: being deleted, or a worker its job's record no longer names. It keeps what it runs on
        # while that is free and takes nothing else; a record that already names its GPUs gets them once
        # it is gone (podsync waits for it), which is no oversubscription.
        if preferred:
            view.occupants.setdefault(pod.node, []).append(pod.key)
            view.state.assume(occupant_id(pod.key), preferred)
        return ""
    need = pod.gpus - len(own)
    chosen = (preferred + [g for g in free if g not in preferred])[: max(need, 0)]
    view.occupants.setdefault(pod.node, []).append(pod.key)
    view.state.assume(occupant_id(pod.key), chosen)
    if len(chosen) < need:
        return f"node {pod.node} is oversubscribed: pod {pod.key} holds {pod.gpus} GPUs, only {len(chosen)} were free"
    return ""


def own_claim_key(pod: PodInfo, loaded: dict[str, Claim]) -> str | None:
    """The loaded record of the pod's own job (owner UID checked) or of its pod group's adopting job."""
    if pod.group is not None:
        key = object_key(pod.namespace, pod.group)
        return key if key in loaded else None
    if pod.job is None:
        return None
    key = object_key(pod.namespace, pod.job)
    claim = loaded.get(key)
    return key if claim is not None and claim.uid == pod.owner_uid else None


def occupant_id(pod_key: str) -> str:
    """The assumed holder of the GPUs a pod holds that no record explains."""
    return f"pod:{pod_key}"

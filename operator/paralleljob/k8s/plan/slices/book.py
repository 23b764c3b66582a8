"""The cluster's MIG-capable GPUs as the core's sharing model sees them (``core.slices.sharing``), built for
one pass from the kept view.

Only DRA nodes whose driver publishes MIG devices take part (``NodeInfo.mig``, ``edge/parse/migdevices``):
their GPUs are the ones a slice can be placed on exactly. A GPU's state comes from the view: free (nobody
owns it), whole (a job, a pod or a claim holds the full GPU), or sliced: the slices the operator's records
place there (their GPUs are held by a ``sliced:`` holder, ``view/clusterview.load_slices``) and the MIG
devices any ResourceClaim holds (another scheduler's, or one of ours whose record is gone). A GPU that is not
healthy, or on a node that takes no new work or that the job may not use, takes no new slice. The profiles a
GPU offers are the MIG devices its driver publishes (:func:`mig_shape`), so the counters are the driver's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from paralleljob.core.cluster import GPUHealth
from paralleljob.core.slices.mig import MigProfile, MigShape, MigSlice
from paralleljob.core.slices.sharing import GpuState, NodeGpus
from paralleljob.k8s.edge.parse.migdevices import GpuSlices
from paralleljob.k8s.edge.status.records import MigGrant, PlacementRecord, PodSlot
from paralleljob.k8s.view.clusterview import SLICED_PREFIX, ClusterView, claims_holder_id, is_sliced_holder

CLAIMS_PREFIX = claims_holder_id("")


@dataclass(frozen=True, slots=True)
class RecordedSlice:
    job: str  # namespace/name of the ParallelJob
    slot: PodSlot
    grant: MigGrant


def mig_shape(gpu: GpuSlices, model: str, memory_gib: float) -> MigShape:
    """The profiles one GPU offers, from the MIG devices its driver publishes: a profile ``<k>g.<m>gb`` has
    ``k`` compute slices, the memory slices of its devices and every start a device of it is published at."""
    starts: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    for device in gpu.devices:
        starts.setdefault(device.profile, []).append(device.start)
        sizes[device.profile] = device.size
    profiles = []
    for name, at in starts.items():
        compute, _, memory = name.partition("g.")
        profiles.append(MigProfile(name, int(compute), sizes[name], int(memory.removesuffix("gb")), tuple(sorted(at))))
    profiles.sort(key=lambda p: (p.compute_slices, p.memory_slices, p.name))
    return MigShape(model, round(memory_gib), tuple(profiles))


def named_profile(shape: MigShape, name: str) -> MigProfile | None:
    return next((p for p in shape.profiles if p.name == name), None)


def recorded(view: ClusterView) -> Iterable[RecordedSlice]:
    """Every slice the loaded records place (a job whose record could not be loaded places none)."""
    for key, claim in view.loaded.items():
        if not claim.record.sliced:
            continue
        for slot in claim.record.slots:
            if slot.mig is not None:
                yield RecordedSlice(key, slot, slot.mig)


def sliced_gpus(view: ClusterView) -> dict[str, list[int]]:
    """node -> the indices of its GPUs that MIG slices hold (the operator's records' and any claim's). From
    the view's named holders alone (``sliced:`` ones, and each node's ``claims:`` one where its MIG offer
    shows a held device), so the gauges of a pass scan neither every GPU nor every pod's holder."""
    out: dict[str, list[int]] = {}
    topology = view.topology
    for holder, gpus in view.named(lambda h: is_sliced_holder(h) or h.startswith(CLAIMS_PREFIX)):
        node = holder.removeprefix(CLAIMS_PREFIX) if holder.startswith(CLAIMS_PREFIX) else None
        info = view.nodes.get(node) if node is not None else None
        if not is_sliced_holder(holder) and (info is None or info.mig is None):
            continue
        for gpu in gpus:
            n = topology.gpu_node[gpu]
            index = gpu - topology.node_first_gpu[n]
            offer = info.mig.gpus if info is not None and info.mig is not None else ()
            if is_sliced_holder(holder) or (index < len(offer) and offer[index].held):
                out.setdefault(topology.node_names[n], []).append(index)
    return {node: sorted(indices) for node, indices in out.items()}


def shared_nodes(
    view: ClusterView,
    admits: Callable[[int], bool] = lambda n: True,
    placed: Mapping[tuple[str, int], list[MigGrant]] | None = None,
) -> list[NodeGpus]:
    """The DRA nodes that publish MIG devices, as :class:`NodeGpus`; a node ``admits`` refuses (by topology
    index), or that takes no new work, is unhealthy: its slices stay in the book, nothing new goes there.
    ``placed``: the slices placed earlier in the pass (``PassContext.slices_placed``), not in a record yet."""
    ours: dict[tuple[str, int], list[MigGrant]] = {key: list(grants) for key, grants in (placed or {}).items()}
    for item in recorded(view):
        if not item.grant.exact:
            continue  # the device plugin's slices (poolbook.py): on no DRA node's GPU
        ours.setdefault((item.slot.node, item.slot.gpu_indices[0]), []).append(item.grant)
    out = []
    for name, info in view.nodes.items():
        n = view.node_index.get(name)
        if info.mig is None or info.mig.api != "dra" or n is None:
            continue
        first = view.topology.node_first_gpu[n]
        gpus = []
        for i, offer in enumerate(info.mig.gpus[: view.topology.node_gpu_count[n]]):
            shape = mig_shape(offer, info.gpu_product, info.gpu_memory_gib)
            gpus.append(gpu_state(view, first + i, claims_holder_id(name), offer, shape, ours.get((name, i), [])))
        healthy = admits(n) and view.state.node_schedulable[n]
        out.append(NodeGpus(name, info.clique or name, tuple(gpus), healthy))
    return out


def gpu_state(
    view: ClusterView, gpu: int, claims_holder: str, offer: GpuSlices, shape: MigShape, ours: list[MigGrant]
) -> GpuState:
    """One GPU as the sharing model sees it: free, whole, or the slices of our records and of held claims."""
    owner = view.state.owner[gpu]
    healthy = view.state.health[gpu] is GPUHealth.HEALTHY
    held = {(d.profile, d.start) for d in offer.held_devices()}
    if owner is None:
        return GpuState(shape.memory_gb, shape, healthy=healthy)
    if is_sliced_holder(owner) or (owner == claims_holder and held):
        placed = held | {(g.profile, g.start) for g in ours if g.start is not None}
        slices = tuple(
            MigSlice(profile, start) for name, start in sorted(placed) if (profile := named_profile(shape, name))
        )
        return GpuState(shape.memory_gb, shape, slices=slices, healthy=healthy)
    return GpuState(shape.memory_gb, shape, whole=True, healthy=healthy)


def unpublished(view: ClusterView, record: PlacementRecord) -> tuple[int, ...]:
    """The record's ranks whose MIG device their node, still there, no longer publishes (a driver that
    re-partitioned the GPU, a pool replaced): their slices are gone, as if their GPU broke."""
    out = []
    for rank, slot in enumerate(record.slots):
        info, grant = view.nodes.get(slot.node), slot.mig
        if info is None or grant is None or info.dra is None or grant.start is None or not slot.gpu_indices:
            continue  # a node that is gone is the failure handler's (its GPUs are offline)
        gpus = info.mig.gpus if info.mig is not None else ()
        index = slot.gpu_indices[0]
        if index >= len(gpus) or gpus[index].device(grant.profile, grant.start) is None:
            out.append(rank)
    return tuple(out)


def sliced_note(view: ClusterView) -> str:
    """What a whole-GPU job waiting for room is told about GPUs that MIG slices hold ("" when none): they
    are never offered whole, however few slices they hold; nor are a device-plugin node's GPUs in MIG mode.
    From the ``sliced:`` holders and the view's MIG nodes alone, so a pass with many waiting jobs does not scan
    every GPU for each."""
    by_node: dict[str, list[str]] = {}
    for holder, _ in view.named(is_sliced_holder):
        node, _, index = holder.removeprefix(SLICED_PREFIX).rpartition("/")
        by_node.setdefault(node, []).append(index)
    return _dra_note(by_node) + _pool_note(view)


def _dra_note(by_node: Mapping[str, list[str]]) -> str:
    return held_note({node: [int(i) for i in ix] for node, ix in by_node.items()}, "MIG slices")


def held_note(by_node: Mapping[str, list[int]], what: str) -> str:
    """What a whole-GPU job waiting for room is told about the GPUs (node -> indices) that ``what`` hold
    ("" when none): how many, and where, three nodes at most."""
    if not by_node:
        return ""
    count = sum(len(indices) for indices in by_node.values())
    shown = "; ".join(f"{node} GPU {','.join(map(str, sorted(ix)))}" for node, ix in sorted(by_node.items())[:3])
    more = f" and {len(by_node) - 3} more node(s)" if len(by_node) > 3 else ""
    return f"; {count} GPU(s) hold {what} and are not offered whole ({shown}{more})"


def _pool_note(view: ClusterView) -> str:
    nodes = sorted(name for name, info in view.pools.items() if info.mig is not None and info.mig.mig_gpus)
    if not nodes:
        return ""
    count = sum(info.mig.mig_gpus for info in view.pools.values() if info.mig is not None)
    more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
    return (
        f"; {count} GPU(s) of device-plugin node(s) {', '.join(nodes[:3])}{more} are in MIG mode: offered only as"
        " nvidia.com/mig-<profile> slices, never whole"
    )

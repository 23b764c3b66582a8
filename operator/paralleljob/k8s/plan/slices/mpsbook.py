"""The cluster's DRA GPUs as the core's sharing model sees them for MPS shares (``spec.gpuSharing.mps``), built
for one admission or repair from the kept view.

Every DRA node takes part (MPS needs no MIG support). A GPU's state comes from the view: free (nobody owns
it), shared (its ``mps:`` holder: the shares of the operator's records and of the pass's earlier placements,
``PassContext.shares_placed``), sliced (a ``sliced:`` holder: MIG slices are there) or whole (a job, a pod
or a claim holds it). A share's pool is its (namespace, percent): the clients of one GPU reach its MPS server
through one ResourceClaim, which lives in one namespace and carries one config (one thread percentage and
one memory limit for every client), so shares of another namespace or another size never join that GPU
(``core.slices.sharing.GpuState.fit``). A GPU that is not healthy, or on a node that takes no new work or
that the job may not use, takes no new share. It scans every GPU of every DRA node, once per MPS job of a
pass: not measured at scale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from paralleljob.core.cluster import GPUHealth
from paralleljob.core.slices.mig import GPU_80GB, MigSlice
from paralleljob.core.slices.sharing import GpuState as Gpu
from paralleljob.core.slices.sharing import MpsShare, NodeGpus
from paralleljob.k8s.edge.status.records import PodSlot
from paralleljob.k8s.plan.slices.book import held_note
from paralleljob.k8s.view.clusterview import MPS_PREFIX, ClusterView, is_mps_holder, is_sliced_holder

# What a GPU with MIG slices looks like here: any slice makes the core refuse a share ("sliced by MIG").
_A_SLICE = (MigSlice(GPU_80GB.profiles[0], 0),)


def pool_of(namespace: str, percent: int) -> str:
    return f"{namespace}/{percent}"


def share_of(namespace: str, percent: int, memory_gib: float) -> MpsShare:
    """One client's share: ``percent`` of the compute and the same fraction of the GPU's memory."""
    return MpsShare(percent, memory_gib * percent / 100, pool_of(namespace, percent))


def recorded_shares(view: ClusterView) -> Iterable[tuple[str, PodSlot]]:
    """(job key namespace/name, slot) of every MPS share the loaded records place."""
    for key, claim in view.loaded.items():
        if claim.record.shared:
            for slot in claim.record.slots:
                yield key, slot


def shares_by_gpu(
    view: ClusterView, placed: Mapping[tuple[str, int], list[tuple[str, int]]] | None = None
) -> dict[tuple[str, int], list[tuple[str, int]]]:
    """(node, GPU index) -> (namespace, percent) of each share there: the records' and the pass's."""
    out: dict[tuple[str, int], list[tuple[str, int]]] = {key: list(v) for key, v in (placed or {}).items()}
    for key, slot in recorded_shares(view):
        if slot.mps is not None:
            out.setdefault((slot.node, slot.gpu_indices[0]), []).append((key.partition("/")[0], slot.mps.percent))
    return out


def mps_nodes(
    view: ClusterView,
    admits: Callable[[int], bool] = lambda n: True,
    placed: Mapping[tuple[str, int], list[tuple[str, int]]] | None = None,
) -> list[NodeGpus]:
    """The DRA nodes as :class:`NodeGpus` for MPS shares; a node ``admits`` refuses (by topology index), or
    that takes no new work, is unhealthy: its shares stay in the book, nothing new goes there."""
    shares = shares_by_gpu(view, placed)
    out = []
    state, topology = view.state, view.topology
    for name, info in view.nodes.items():
        n = view.node_index.get(name)
        if info.dra is None or n is None:
            continue
        first, memory = topology.node_first_gpu[n], info.gpu_memory_gib
        gpus = []
        for i in range(topology.node_gpu_count[n]):
            owner, healthy = state.owner[first + i], state.health[first + i] is GPUHealth.HEALTHY
            if owner is None:
                gpus.append(Gpu(memory, None, healthy=healthy))
            elif is_mps_holder(owner):
                here = tuple(share_of(ns, pct, memory) for ns, pct in shares.get((name, i), []))
                gpus.append(Gpu(memory, None, shares=here, healthy=healthy))
            elif is_sliced_holder(owner):
                gpus.append(Gpu(memory, GPU_80GB, slices=_A_SLICE, healthy=healthy))
            else:
                gpus.append(Gpu(memory, None, whole=True, healthy=healthy))
        out.append(NodeGpus(name, info.clique or name, tuple(gpus), admits(n) and state.node_schedulable[n]))
    return out


def shares_on(view: ClusterView, node: str, index: int) -> tuple[str, ...]:
    """The MPS shares the operator's records place on GPU ``index`` of ``node``: ``<job> <percent>%`` each."""
    return tuple(
        sorted(
            f"{key} {slot.mps.percent}%"
            for key, slot in recorded_shares(view)
            if slot.mps is not None and slot.node == node and slot.gpu_indices == (index,)
        )
    )


def mps_gpus(view: ClusterView) -> dict[str, list[int]]:
    """node -> the indices of its GPUs that MPS shares hold, from the view's named ``mps:`` holders alone (the
    gauges of a pass scan neither every GPU nor every pod's holder)."""
    out: dict[str, list[int]] = {}
    for holder, _ in view.named(is_mps_holder):
        node, _, index = holder.removeprefix(MPS_PREFIX).rpartition("/")
        out.setdefault(node, []).append(int(index))
    return {node: sorted(indices) for node, indices in sorted(out.items())}


def mps_note(view: ClusterView) -> str:
    """What a whole-GPU job waiting for room is told about GPUs that MPS shares hold ("" when none)."""
    return held_note(mps_gpus(view), "MPS shares")

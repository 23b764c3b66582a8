"""GPU sharing for small jobs: a GPU's state (whole, MIG slices or MPS shares), requests, and the packing rule.

A small job asks for a MIG profile (:mod:`paralleljob.core.slices.mig`) or an MPS share: a percentage of the
GPU's compute (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, the DRA driver's ``defaultActiveThreadPercentage``)
and a pinned memory limit (``defaultPinnedDeviceMemoryLimit``). A GPU is in one mode at a time: free,
whole (one job owns it), sliced (MIG devices) or shared (MPS clients, at most ``max_clients``; CUDA's MPS
guide gives 48 client contexts a device under Volta MPS). Shares never commit more than 100% of the compute
or more than the GPU's memory: MPS itself would let them, but then nothing is promised to anyone. A share may
name a pool: a GPU holds shares of one pool only (the operator's pools are namespace and percent, since the
clients of a GPU share one ResourceClaim and its one config; the simulator's shares have none and mix).

The packing rule (:func:`pack`) keeps whole nodes and whole NVLink domains free for the jobs that need
them: a slice or a share goes first to a GPU that is already sliced or shared, then to a free GPU on a
node that is already partly used (the node with the fewest free GPUs first), then to a node in a domain
that is partly used; only when none of those fits does it break a whole node, and a whole domain last.
Whole-GPU requests (all on one node) follow the same order with best fit. Every refusal says, per node,
why. It scans every GPU it is given: the simulator's clusters, and in the operator only the GPUs of nodes
that publish MIG devices (``k8s/plan/slices/book.py``), a small part of a cluster of whole-GPU gangs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from paralleljob.core.errors import InvalidRequest, PlacementInfeasible
from paralleljob.core.slices.mig import GPU_80GB, MigProfile, MigShape, MigSlice, best_start, compute_used, why_not

MPS_MAX_CLIENTS = 48


@dataclass(frozen=True, slots=True)
class MpsShare:
    compute_pct: int  # 1..100 of the GPU's SMs
    memory_gb: float
    # Shares of one pool only go on one GPU ("": any): in the operator a GPU's clients share one MPS server
    # and one ResourceClaim, a namespaced object with one config, so the pool is (namespace, percent).
    pool: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.compute_pct <= 100 or not math.isfinite(self.memory_gb) or self.memory_gb < 0:
            raise InvalidRequest(f"an MPS share needs 1..100% compute and memory >= 0, got {self}")


@dataclass(frozen=True, slots=True)
class WholeGpus:
    count: int  # whole GPUs, all on one node

    def __post_init__(self) -> None:
        if self.count < 1:
            raise InvalidRequest(f"a whole-GPU request needs at least one GPU, got {self.count}")


Request = WholeGpus | MigProfile | MpsShare


def describe(request: Request) -> str:
    if isinstance(request, WholeGpus):
        return f"{request.count} whole GPU(s)"
    if isinstance(request, MigProfile):
        return f"MIG {request.name}"
    return f"an MPS share of {request.compute_pct}% and {request.memory_gb:g} GB"


def mps_share_for(milli: int, gpu_memory_gb: float) -> MpsShare:
    """An MPS share for ``milli`` thousandths of a GPU (Alibaba's ``gpu_milli``): the compute percentage
    rounded up, and the same fraction of the GPU's memory (the trace asks for no GPU memory)."""
    if not 1 <= milli <= 1000:
        raise InvalidRequest(f"gpu_milli must be 1..1000, got {milli}")
    pct = math.ceil(milli / 10)
    return MpsShare(pct, gpu_memory_gb * pct / 100)


@dataclass(frozen=True, slots=True)
class GpuState:
    memory_gb: float = 80.0
    shape: MigShape | None = GPU_80GB  # None: this GPU cannot be sliced
    whole: bool = False
    slices: tuple[MigSlice, ...] = ()
    shares: tuple[MpsShare, ...] = ()
    healthy: bool = True
    max_clients: int = MPS_MAX_CLIENTS

    @property
    def used(self) -> bool:
        return self.whole or bool(self.slices) or bool(self.shares)

    @property
    def whole_free(self) -> bool:
        """Offered as a whole GPU: healthy and nothing on it. A sliced or shared GPU never is."""
        return self.healthy and not self.used

    @property
    def compute_held(self) -> float:
        """The fraction of the GPU's compute that its occupants hold (a 3g slice holds 3/7)."""
        if self.whole:
            return 1.0
        return compute_used(self.slices) / 7 + sum(s.compute_pct for s in self.shares) / 100

    def fit(self, request: MigProfile | MpsShare) -> MigSlice | MpsShare | str:
        """Where the slice or share would go on this GPU, or why it cannot."""
        if not self.healthy:
            return "unhealthy"
        if self.whole:
            return "allocated whole"
        if isinstance(request, MigProfile):
            if self.shares:
                return "shared by MPS clients"
            # by name: a profile is what users ask for, and each GPU model places it its own way
            own = next((p for p in self.shape.profiles if p.name == request.name), None) if self.shape else None
            if self.shape is None or own is None:
                return f"no MIG {request.name} on this GPU model"
            start = best_start(self.shape, self.slices, own)
            return why_not(self.slices, own) if start is None else MigSlice(own, start)
        if self.slices:
            return "sliced by MIG"
        if self.shares and self.shares[0].pool != request.pool:
            return f"shared by MPS clients of another pool ({self.shares[0].pool})"
        if len(self.shares) >= self.max_clients:
            return f"{self.max_clients} MPS clients already"
        pct = sum(s.compute_pct for s in self.shares)
        if pct + request.compute_pct > 100:
            return f"{request.compute_pct}% compute asked, {100 - pct}% left"
        memory = sum(s.memory_gb for s in self.shares)
        if memory + request.memory_gb > self.memory_gb + 1e-9:
            return f"{request.memory_gb:g} GB asked, {self.memory_gb - memory:g} GB left"
        return request

    def with_(self, grant: MigSlice | MpsShare | None) -> GpuState:
        """This GPU with the grant added (None: the whole GPU); the caller checked :meth:`fit`."""
        if grant is None:
            return replace(self, whole=True)
        if isinstance(grant, MigSlice):
            return replace(self, slices=(*self.slices, grant))
        return replace(self, shares=(*self.shares, grant))

    def without(self, grant: MigSlice | MpsShare | None) -> GpuState:
        if grant is None:
            return replace(self, whole=False)
        if isinstance(grant, MigSlice):
            rest = list(self.slices)
            rest.remove(grant)
            return replace(self, slices=tuple(rest))
        shares = list(self.shares)
        shares.remove(grant)
        return replace(self, shares=tuple(shares))


@dataclass(frozen=True, slots=True)
class NodeGpus:
    name: str
    domain: str  # its NVLink domain: the node itself on HGX, the rack's clique on NVL72
    gpus: tuple[GpuState, ...]
    healthy: bool = True

    @property
    def used(self) -> bool:
        return any(g.used for g in self.gpus)

    @property
    def whole_free_gpus(self) -> int:
        return sum(g.whole_free for g in self.gpus) if self.healthy else 0


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    gpus: tuple[int, ...]
    grant: MigSlice | MpsShare | None  # None: the GPUs whole
    why: str


def pack(request: Request, nodes: Sequence[NodeGpus], label: str = "request") -> Placement:
    """Where ``request`` goes under the packing rule (module docstring); PlacementInfeasible with one reason
    per node when nothing fits."""
    used_domains = {n.domain for n in nodes if n.used}
    reasons: list[str] = []
    best: tuple[tuple[int | float | str, ...], Placement] | None = None
    for node in nodes:
        if not node.healthy:
            reasons.append(f"{node.name}: unhealthy")
            continue
        spare = node.whole_free_gpus
        domain_whole = node.domain not in used_domains
        if isinstance(request, WholeGpus):
            if spare < request.count:
                reasons.append(f"{node.name}: {spare} whole GPU(s) free of {len(node.gpus)}, {request.count} asked")
                continue
            picked = tuple(i for i, g in enumerate(node.gpus) if g.whole_free)[: request.count]
            breaks = not node.used and request.count < len(node.gpus)
            key: tuple[int | float | str, ...] = (breaks, domain_whole and breaks, spare - request.count, node.name)
            why = f"{node.name}: {request.count} whole GPU(s), {spare - request.count} left whole"
            placement = Placement(node.name, picked, None, why + (", breaks a whole node" if breaks else ""))
        else:
            fits: list[tuple[tuple[int | float | str, ...], Placement]] = []
            refusals: Counter[str] = Counter()
            for i, gpu in enumerate(node.gpus):
                grant = gpu.fit(request)
                if isinstance(grant, str):
                    refusals[grant] += 1
                    continue
                left = 1.0 - gpu.with_(grant).compute_held
                fits.append((
                    (not gpu.used, not node.used, domain_whole, spare, left, node.name, i),
                    Placement(node.name, (i,), grant, _why(node, gpu, domain_whole)),
                ))  # fmt: skip
            if not fits:
                reasons.append(f"{node.name}: " + ", ".join(f"{n} GPU(s) {why}" for why, n in sorted(refusals.items())))
                continue
            key, placement = min(fits, key=lambda f: f[0])
        if best is None or key < best[0]:
            best = (key, placement)
    if best is None:
        raise PlacementInfeasible(label, [f"no node holds {describe(request)}", *reasons])
    return best[1]


def _why(node: NodeGpus, gpu: GpuState, domain_whole: bool) -> str:
    if gpu.used:
        return f"{node.name}: onto a GPU already {'sliced' if gpu.slices else 'shared'}"
    if node.used:
        return f"{node.name}: a free GPU on a node already in use ({node.whole_free_gpus} free)"
    return f"{node.name}: breaks a whole node" + (" and a whole NVLink domain" if domain_whole else "")


def apply(nodes: Sequence[NodeGpus], placement: Placement, *, release: bool = False) -> tuple[NodeGpus, ...]:
    """The nodes with ``placement`` taken (or given back with ``release``)."""
    out = []
    for node in nodes:
        if node.name == placement.node:
            gpus = list(node.gpus)
            for i in placement.gpus:
                gpus[i] = gpus[i].without(placement.grant) if release else gpus[i].with_(placement.grant)
            node = replace(node, gpus=tuple(gpus))
        out.append(node)
    return tuple(out)


def pack_each(
    nodes: Sequence[NodeGpus], labels: Sequence[str], place: Callable[[Sequence[NodeGpus], str], Placement]
) -> list[Placement]:
    """One placement per label, by ``place`` (a slice or share packed), one after the other: each sees the
    nodes with those before it taken. :class:`PlacementInfeasible` from the first that does not fit."""
    placements = []
    for label in labels:
        placement = place(nodes, label)
        nodes = apply(nodes, placement)
        placements.append(placement)
    return placements

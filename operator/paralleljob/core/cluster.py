"""Mutable cluster state with incremental per-domain counters.

Per GPU: health and owner. Per node: how many healthy, unowned GPUs it has and whether it takes new work.
Per domain (every level above the node): a histogram of its nodes by free count (split by GPU-memory
class) and the nodes themselves bucketed by free count. Every change touches O(levels) counters, and every
feasibility question reads histograms, never the GPUs (SPEC section 3, "Scale").

A state that lives longer than one round of decisions (the operator's incremental view) can try decisions
out and take them back: between :meth:`ClusterState.begin_trial` and :meth:`ClusterState.rollback` every
mutation is journalled with its inverse, so undoing costs what the decisions changed, not the cluster.

Assumed usage is an overlay beside the jobs' allocations, never a fake job among them: GPUs that something
other than a job holds (a pod no placement explains, devices in another scheduler's claims) or that a
decision masks for a moment (the GPUs reserved for the head job while others backfill, the GPUs a job's
node filter holds back) are taken with :meth:`ClusterState.assume` and given back with
:meth:`ClusterState.forget`. They count against the free GPUs exactly like an allocation (``owner`` names
the holder), but ``allocations`` holds jobs only, as Kueue keeps assumed workloads apart from admitted ones
and kube-scheduler keeps assumed pods in its cache beside the bound ones.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from paralleljob.core.errors import InvalidRequest
from paralleljob.core.topology import Topology, TopologyIndex


class GPUHealth(enum.Enum):
    HEALTHY = "Healthy"
    DEGRADED = "Degraded"  # usable by its current job, never given new work
    RESETTING = "Resetting"
    OFFLINE = "Offline"


class GPUState(enum.Enum):
    """The state a user sees (SPEC section 3): allocation and health folded into one word."""

    AVAILABLE = "Available"
    ALLOCATED = "Allocated"
    DEGRADED = "Degraded"
    RESETTING = "Resetting"
    OFFLINE = "Offline"


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: str
    groups: tuple[tuple[int, ...], ...]  # GPU ids per TP group, flat index d * pp + p
    memory_per_gpu_gb: float

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(g for group in self.groups for g in group)


class ClusterState:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.index = TopologyIndex(topology)
        n_gpus, g_max = topology.num_gpus, topology.max_gpus_per_node
        self.health: list[GPUHealth] = [GPUHealth.HEALTHY] * n_gpus
        self.owner: list[str | None] = [None] * n_gpus
        self.memory_used: list[float] = [0.0] * n_gpus
        self.node_free: list[int] = list(topology.node_gpu_count)  # healthy and unowned
        self.node_schedulable: list[bool] = [True] * topology.num_nodes
        self.allocations: dict[str, Allocation] = {}  # jobs only
        self.assumed: dict[str, tuple[int, ...]] = {}  # holder -> GPUs it holds that no job does (the overlay)
        self._width = g_max + 1
        classes = len(self.index.memory_classes)
        self._single_class = classes == 1
        # hist[level][domain][cls * width + k]: nodes of that memory class with k usable free GPUs
        self.hist: list[list[list[int]]] = [[]]
        # buckets[level][domain][k]: those nodes, as insertion-ordered sets (dict keys)
        self.buckets: list[list[list[dict[int, None]]]] = [[]]
        for level in range(1, topology.top + 1):
            doms = topology.num_domains(level)
            self.hist.append([[0] * (classes * self._width) for _ in range(doms)])
            self.buckets.append([[{} for _ in range(self._width)] for _ in range(doms)])
        self._undo: list[Callable[[], object]] | None = None  # inverses of the mutations of a trial
        # With begin_trial(keep_order=True): each bucket's order before a trial first took a node out of it
        self._orders: dict[tuple[int, int, int], tuple[int, ...]] | None = None
        for node in range(topology.num_nodes):
            self._account(node, self.usable_free(node), +1)
        # Totals kept as things change, so counts() never scans the GPUs (it is read after every pass).
        self._allocated = 0
        self._unhealthy = 0
        self._usable = sum(self.node_free)

    # ---- trials ----------------------------------------------------------------------------------
    @property
    def in_trial(self) -> bool:
        return self._undo is not None

    def begin_trial(self, keep_order: bool = False) -> None:
        """Journal every mutation from now on, so :meth:`rollback` can take them all back. ``keep_order``:
        the rollback lists every domain's nodes in their order before the trial too (each bucket a node
        leaves is copied once, at C speed), so a question asked in a trial changes no later tie-break."""
        if self._undo is not None:
            raise InvalidRequest("a trial is already under way")
        self._undo = []
        self._orders = {} if keep_order else None

    def rollback(self) -> int:
        """Undo every mutation since :meth:`begin_trial`, newest first; returns how many were undone.

        Counters, owners, health and allocations come back exactly; without ``keep_order`` the order in
        which a domain's nodes with the same free count are listed may differ (a node that moved comes back
        last)."""
        undo, self._undo = self._undo, None
        orders, self._orders = self._orders, None
        if undo is None:
            return 0
        for step in reversed(undo):
            step()
        for (level, domain, free), before in (orders or {}).items():
            bucket = self.buckets[level][domain][free]
            if tuple(bucket) != before:  # the members it had, listed as they were (those it gained are gone)
                members = dict(bucket)
                bucket.clear()
                bucket.update(dict.fromkeys(n for n in before if n in members))
                bucket.update(members)  # none, unless a mutation escaped the journal: kept, listed last
        return len(undo)

    def _reinstate(self, allocation: Allocation, table: dict[str, Allocation] | None = None) -> None:
        """The exact inverse of :meth:`release` (of :meth:`forget` for an assumed holder, ``table`` None):
        no checks, since the GPUs may have broken while held."""
        taken: dict[int, int] = {}
        gpu_node = self.topology.gpu_node
        for gpu in allocation.gpus:
            self.owner[gpu] = allocation.job_id
            self.memory_used[gpu] += allocation.memory_per_gpu_gb
            if self.health[gpu] is GPUHealth.HEALTHY:
                taken[gpu_node[gpu]] = taken.get(gpu_node[gpu], 0) + 1
        for node, count in taken.items():
            self._change_node(node, free_delta=-count)
        if table is None:
            self.assumed[allocation.job_id] = self.assumed.get(allocation.job_id, ()) + allocation.gpus
        else:
            table[allocation.job_id] = allocation
        self._allocated += len(allocation.gpus)

    # ---- counters ------------------------------------------------------------------------------
    def usable_free(self, node: int) -> int:
        """Free healthy GPUs on a node that may take new work (0 when cordoned or not Ready)."""
        return self.node_free[node] if self.node_schedulable[node] else 0

    def _account(self, node: int, free: int, sign: int) -> None:
        offset = self.index.node_memory_class[node] * self._width + free
        domain_of = self.topology.domain_of
        orders = self._orders
        for level in range(1, self.topology.top + 1):
            dom = domain_of[level][node]
            self.hist[level][dom][offset] += sign
            bucket = self.buckets[level][dom][free]
            if sign > 0:
                bucket[node] = None
            else:
                if orders is not None and (level, dom, free) not in orders:
                    orders[(level, dom, free)] = tuple(bucket)
                del bucket[node]

    def _change_node(self, node: int, free_delta: int = 0, schedulable: bool | None = None) -> None:
        before = self.usable_free(node)
        self.node_free[node] += free_delta
        if schedulable is not None:
            self.node_schedulable[node] = schedulable
        after = self.usable_free(node)
        self._usable += after - before
        if after != before:
            self._account(node, before, -1)
            self._account(node, after, +1)

    # ---- queries ---------------------------------------------------------------------------------
    def gpu_state(self, gpu: int) -> GPUState:
        health = self.health[gpu]
        if health is not GPUHealth.HEALTHY:
            return GPUState(health.value)
        return GPUState.ALLOCATED if self.owner[gpu] is not None else GPUState.AVAILABLE

    def eligible(self, gpu: int, memory_gb: float) -> bool:
        """Whether a job may hold this GPU: healthy, unowned, enough memory.

        Deliberately silent about cordons: a cordoned node takes no *new* work (``usable_free`` is 0, so
        the placer never picks it), but a job repaired in place keeps its intact GPUs there."""
        node = self.topology.gpu_node[gpu]
        return (
            self.owner[gpu] is None
            and self.health[gpu] is GPUHealth.HEALTHY
            and self.memory_used[gpu] + memory_gb <= self.topology.node_gpu_memory_gb[node]
        )

    def eligible_gpus(self, node: int, memory_gb: float) -> list[int]:
        return [g for g in self.topology.node_gpus(node) if self.eligible(g, memory_gb)]

    def memory_ok(self, node: int, memory_gb: float) -> bool:
        return memory_gb <= self.topology.node_gpu_memory_gb[node]

    def node_slots(self, node: int, tp: int, memory_gb: float) -> int:
        """How many TP groups of ``tp`` GPUs needing ``memory_gb`` each this node can take now."""
        if not self.memory_ok(node, memory_gb):
            return 0
        return self.usable_free(node) // tp

    def _classes(self, memory_gb: float) -> range:
        classes = self.index.memory_classes
        first = next((i for i, m in enumerate(classes) if m >= memory_gb), len(classes))
        return range(first, len(classes))

    def free_histogram(self, level: int, domain: int, memory_gb: float) -> list[int]:
        """Nodes of a domain by usable free count, counting only nodes whose GPUs have enough memory.

        The list may be the live counter row: read it, never change it."""
        if level == 0:
            row = [0] * self._width
            if self.memory_ok(domain, memory_gb):
                row[self.usable_free(domain)] = 1
            return row
        hist = self.hist[level][domain]
        width = self._width
        if self._single_class:
            # The common case: one GPU memory size in the whole cluster.
            return hist if memory_gb <= self.index.memory_classes[0] else [0] * width
        classes = self._classes(memory_gb)
        row = [0] * width
        for cls in classes:
            base = cls * width
            for k in range(width):
                row[k] += hist[base + k]
        return row

    def domain_slots(self, level: int, domain: int, tp: int, memory_gb: float, per_node_unit: int = 1) -> int:
        """Sum over the domain's nodes of ``(free // tp) // per_node_unit``."""
        row = self.free_histogram(level, domain, memory_gb)
        return sum(count * ((k // tp) // per_node_unit) for k, count in enumerate(row) if count)

    def nodes_with_free(self, level: int, domain: int, free: int, memory_gb: float) -> Iterator[int]:
        """Nodes of a domain with exactly ``free`` usable GPUs and enough memory, in a stable order."""
        if level == 0:
            if self.usable_free(domain) == free and self.memory_ok(domain, memory_gb):
                yield domain
            return
        for node in self.buckets[level][domain][free]:
            if self.memory_ok(node, memory_gb):
                yield node

    def counts(self) -> dict[str, int]:
        """GPUs in total, allocated, not healthy, and free for new work; O(1)."""
        return {
            "total": self.topology.num_gpus,
            "allocated": self._allocated,
            "unhealthy": self._unhealthy,
            "free": self._usable,
        }

    # ---- mutations -------------------------------------------------------------------------------
    def allocate(self, allocation: Allocation) -> None:
        """Give every GPU of ``allocation`` to its job; all-or-nothing, validated first."""
        if allocation.job_id in self.allocations or allocation.job_id in self.assumed:
            raise InvalidRequest(f"job {allocation.job_id!r} already holds GPUs")
        self._take(allocation)
        self.allocations[allocation.job_id] = allocation
        if self._undo is not None:
            self._undo.append(lambda: self._release(allocation.job_id))

    def assume(self, holder: str, gpus: Sequence[int]) -> None:
        """Take ``gpus`` for ``holder``, which is not a job (see the module docstring); all-or-nothing. A
        holder that holds GPUs already takes these too."""
        if not gpus:
            return
        if holder in self.allocations:
            raise InvalidRequest(f"{holder!r} is a job: its GPUs are an allocation, not assumed usage")
        allocation = Allocation(holder, (tuple(gpus),), 0.0)
        self._take(allocation)
        self.assumed[holder] = self.assumed.get(holder, ()) + allocation.gpus
        if self._undo is not None:
            self._undo.append(lambda: self._forget_gpus(holder, allocation.gpus))

    def forget(self, holder: str) -> tuple[int, ...]:
        """Give back every GPU ``holder`` was assumed to hold; returns them (empty: it held none)."""
        gpus = self.assumed.get(holder, ())
        if gpus:
            self._forget_gpus(holder, gpus)
            if self._undo is not None:
                self._undo.append(lambda: self._reinstate(Allocation(holder, (gpus,), 0.0)))
        return gpus

    def _forget_gpus(self, holder: str, gpus: tuple[int, ...]) -> None:
        gone = set(gpus)
        left = tuple(g for g in self.assumed[holder] if g not in gone)
        if left:
            self.assumed[holder] = left
        else:
            del self.assumed[holder]
        self._give_back(Allocation(holder, (gpus,), 0.0))

    def _take(self, allocation: Allocation) -> None:
        gpus = allocation.gpus
        if len(set(gpus)) != len(gpus):
            raise InvalidRequest(f"allocation of {allocation.job_id!r} names a GPU twice")
        num_gpus, owner, health = self.topology.num_gpus, self.owner, self.health
        for gpu in gpus:
            if not (isinstance(gpu, int) and 0 <= gpu < num_gpus):
                self.topology.check_gpu(gpu)  # raises with the message a user needs
            if (
                owner[gpu] is not None
                or health[gpu] is not GPUHealth.HEALTHY
                or not self.eligible(gpu, allocation.memory_per_gpu_gb)
            ):
                raise InvalidRequest(f"GPU {gpu} cannot take {allocation.job_id!r}: {self.gpu_state(gpu).value}")
        taken: dict[int, int] = {}
        gpu_node = self.topology.gpu_node
        for gpu in gpus:
            self.owner[gpu] = allocation.job_id
            self.memory_used[gpu] += allocation.memory_per_gpu_gb
            node = gpu_node[gpu]
            taken[node] = taken.get(node, 0) + 1
        for node, count in taken.items():
            self._change_node(node, free_delta=-count)
        self._allocated += len(gpus)

    def release(self, job_id: str) -> Allocation | None:
        allocation = self._release(job_id)
        if allocation is not None and self._undo is not None:
            self._undo.append(lambda: self._reinstate(allocation, self.allocations))
        return allocation

    def node_order(self, job_id: str) -> dict[tuple[int, int, int], tuple[int, ...]]:
        """The order of the buckets holding ``job_id``'s nodes now, for :meth:`restore_node_order`."""
        allocation = self.allocations[job_id]
        gpu_node, domain_of = self.topology.gpu_node, self.topology.domain_of
        out: dict[tuple[int, int, int], tuple[int, ...]] = {}
        for node in {gpu_node[gpu] for gpu in allocation.gpus}:
            free = self.usable_free(node)
            for level in range(1, self.topology.top + 1):
                key = (level, domain_of[level][node], free)
                if key not in out:
                    out[key] = tuple(self.buckets[level][key[1]][free])
        return out

    def restore_node_order(self, order: dict[tuple[int, int, int], tuple[int, ...]]) -> None:
        """List the nodes of those buckets in the saved order again. Releasing a job and allocating it back
        leaves every count as it was but lists its nodes last among their equals; a question asked with
        the job's GPUs counted as free (the move-back's "best placement now") must not change which of two
        equal nodes the next placement takes. Buckets whose members changed meanwhile are left alone."""
        for (level, domain, free), nodes in order.items():
            bucket = self.buckets[level][domain][free]
            if tuple(bucket) != nodes and set(bucket) == set(nodes):
                bucket.clear()
                bucket.update(dict.fromkeys(nodes))

    def _release(self, job_id: str) -> Allocation | None:
        allocation = self.allocations.pop(job_id, None)
        if allocation is not None:
            self._give_back(allocation)
        return allocation

    def _give_back(self, allocation: Allocation) -> None:
        freed: dict[int, int] = {}
        gpu_node = self.topology.gpu_node
        for gpu in allocation.gpus:
            self.owner[gpu] = None
            self.memory_used[gpu] = max(0.0, self.memory_used[gpu] - allocation.memory_per_gpu_gb)
            if self.health[gpu] is GPUHealth.HEALTHY:
                node = gpu_node[gpu]
                freed[node] = freed.get(node, 0) + 1
        for node, count in freed.items():
            self._change_node(node, free_delta=count)
        self._allocated -= len(allocation.gpus)

    def set_health(self, gpu: int, health: GPUHealth) -> GPUHealth:
        """Change one GPU's health; returns the previous value."""
        self.topology.check_gpu(gpu)
        before = self.health[gpu]
        if before is health:
            return before
        if self._undo is not None:
            self._undo.append(lambda: self.set_health(gpu, before))
        self.health[gpu] = health
        self._unhealthy += (before is GPUHealth.HEALTHY) - (health is GPUHealth.HEALTHY)
        if self.owner[gpu] is None:
            was_free, is_free = before is GPUHealth.HEALTHY, health is GPUHealth.HEALTHY
            if was_free != is_free:
                self._change_node(self.topology.gpu_node[gpu], free_delta=1 if is_free else -1)
        return before

    def set_node_schedulable(self, node: int, schedulable: bool) -> None:
        if not 0 <= node < self.topology.num_nodes:
            raise InvalidRequest(f"unknown node index {node}")
        before = self.node_schedulable[node]
        if self._undo is not None and before != schedulable:
            self._undo.append(lambda: self.set_node_schedulable(node, before))
        self._change_node(node, schedulable=schedulable)

    def jobs_on(self, gpus: Sequence[int]) -> list[str]:
        """Jobs holding any of ``gpus``, in first-seen order (assumed holders are no jobs)."""
        seen: dict[str, None] = {}
        for gpu in gpus:
            owner = self.owner[gpu]
            if owner is not None and owner in self.allocations:
                seen[owner] = None
        return list(seen)


@contextmanager
def closed_nodes(state: ClusterState, nodes: Sequence[int]) -> Iterator[None]:
    """The nodes take no new work for the block (schedulable ones only; reopened on exit): how the NVLink
    placer keeps tiers apart and spares free, how a move plan keeps its held GPUs for the job it frees them
    for, and how the operator's tray admission and room-making do the same on their view."""
    closed = [n for n in nodes if state.node_schedulable[n]]
    for n in closed:
        state.set_node_schedulable(n, False)
    try:
        yield
    finally:
        for n in closed:
            state.set_node_schedulable(n, True)

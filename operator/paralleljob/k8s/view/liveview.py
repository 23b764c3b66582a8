"""The cluster view kept alive between reconcile passes and patched with what changed since the last one.

A pass with nothing changed costs a look at the stores' change lists and at the claims (one per active
job), not a rebuild of 100k GPUs. Correctness is defined by ``view.build_view``: after every refresh the
kept view must equal a rebuild from the same nodes, pods and claims, and the periodic self-check
(``viewcheck.py``) holds it to that. The patching follows the rebuild's own order, per node:

* a GPU node added, removed, or changed in what the topology is made of (GPU count, memory, product,
  domain labels), a ghost appearing or going, a full re-list, a claim change while any claim is in
  conflict (older claims win, so one change can reshuffle the winners), or a claim of MIG slices coming or
  going (its GPUs are shared with other slices' records; not the device plugin's slices, which hold no
  GPU): **rebuild**;
* otherwise every *dirty* node (its Node changed, a GPU-holding pod on it came, went or changed, or a
  changed claim or that job's pods touch it) is redone the way the rebuild does it: health lifted, its
  foreign pods let go, changed claims released and loaded, its unexplained pods placed again in the
  store's order, health and schedulability applied last.

Nothing here is persisted: a restarted operator starts with a rebuild, so crash safety is the rebuild's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from paralleljob.core.cluster import GPUHealth
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.view.clusterview import (
    Claim,
    ClusterView,
    apply_health,
    build_view,
    claims_holder_id,
    hold_claimed_devices,
    is_pool,
    load_claim,
    occupant_id,
    occupy_node,
)
from paralleljob.k8s.view.store import ObjectStore

log = logging.getLogger("paralleljob.k8s.view.clusterview")


class NodeSource(Protocol):
    """Where the view reads nodes: the node store itself, or the DRA overlay of it (``dranodes.py``)."""

    def values(self) -> list[NodeInfo]: ...

    def get(self, namespace: str, name: str) -> NodeInfo | None: ...

    def take_changes(self) -> tuple[list[tuple[str, str]], bool]: ...


class NeedsRebuild(Exception):
    """What changed cannot be patched in; the view is built again from scratch."""


def _shape(info: NodeInfo) -> tuple[object, ...]:
    """What the topology is made of, of one node: a change here means a new topology."""
    roots = info.dra.pcie_roots if info.dra is not None else ()
    return (info.gpu_count, info.gpu_memory_gib, info.gpu_product, info.domains, roots)


def _job_key(pod: PodInfo) -> str | None:
    """The ParallelJob whose claim may explain this pod: its own, or its pod group's adopting job."""
    owner = pod.job if pod.job is not None else pod.group
    return object_key(pod.namespace, owner) if owner is not None else None


class LiveView:
    """The view over ``nodes`` and ``pods`` (stores this object alone drains), refreshed once per pass."""

    def __init__(
        self,
        config: TopologyConfig,
        nodes: NodeSource,
        pods: ObjectStore[PodInfo],
        on_rebuild: Callable[[str], None] = lambda why: None,
    ) -> None:
        self.config = config
        self.on_rebuild = on_rebuild
        self.nodes = nodes
        self.pods = pods
        self.view: ClusterView | None = None
        self.rebuilds: dict[str, int] = {}  # why -> how many times (for tests and the log)
        self._claims: dict[str, Claim] = {}
        self._gpu_pods: dict[tuple[str, str], PodInfo] = {}  # GPU-holding pods by store key
        self._on_node: dict[str, set[tuple[str, str]]] = {}
        self._of_job: dict[str, set[tuple[str, str]]] = {}

    def rebuild(self, claims: Sequence[Claim], why: str) -> ClusterView:
        """Start over from the stores (what every pass did before this view was kept)."""
        self.view = None  # if the build raises, the changes just drained are lost: the next refresh starts over
        self.nodes.take_changes()
        self.pods.take_changes()
        pods = self.pods.values()
        view = build_view(self.nodes.values(), pods, claims, self.config)
        self.adopt(view, claims, pods)
        self.rebuilds[why] = self.rebuilds.get(why, 0) + 1
        self.on_rebuild(why)
        return view

    def adopt(self, view: ClusterView, claims: Sequence[Claim], pods: Sequence[PodInfo]) -> None:
        """Take ``view`` (built from ``claims`` and the stores' current contents) as the kept one."""
        self.view = view
        self._claims = {claim.key: claim for claim in claims}
        self._gpu_pods, self._on_node, self._of_job = {}, {}, {}
        for pod in pods:
            self._index((pod.namespace, pod.name), pod)

    def refresh(self, claims: Sequence[Claim]) -> ClusterView:
        """The view as of now: patched when possible, else rebuilt. ``claims`` as for ``build_view``."""
        view = self.view
        if view is None:
            return self.rebuild(claims, "start")
        node_keys, relisted_nodes = self.nodes.take_changes()
        pod_keys, relisted_pods = self.pods.take_changes()
        if relisted_nodes or relisted_pods:
            return self.rebuild(claims, "relist")
        try:
            self._patch(view, node_keys, pod_keys, claims)
        except NeedsRebuild as why:
            return self.rebuild(claims, str(why))
        except Exception:  # a half-patched view must never be used; the rebuild is always right
            log.exception("patching the cluster view failed; rebuilding it")
            return self.rebuild(claims, "error")
        return view

    # ---- patching -------------------------------------------------------------------------------------
    def _patch(
        self,
        view: ClusterView,
        node_keys: list[tuple[str, str]],
        pod_keys: list[tuple[str, str]],
        claims: Sequence[Claim],
    ) -> None:
        dirty: set[str] = set()
        for _, name in node_keys:
            info = self.nodes.get("", name)
            if info is not None and is_pool(info):
                view.pools[name] = info
            else:
                view.pools.pop(name, None)
            new = info if info is not None and info.gpu_count > 0 else None
            old = view.nodes.get(name)
            if (old is None) != (new is None) or (old and new and _shape(old) != _shape(new)):
                raise NeedsRebuild("topology")
            if new is not None:
                view.nodes[name] = new
                dirty.add(name)
        for key in pod_keys:
            dirty |= self._repod(key)
        wanted = {claim.key: claim for claim in claims}
        gone = [key for key, claim in self._claims.items() if wanted.get(key) != claim]
        new_claims = [claim for claim in claims if self._claims.get(claim.key) != claim]
        # Older claims win a contested GPU, so while any claim is in conflict a change of the claims' order
        # alone (dicts keep insertion order) can change the winners, just as a changed claim can.
        reordered = bool(view.conflicts) and list(wanted) != list(self._claims)
        if gone or new_claims or reordered:
            if view.conflicts:
                raise NeedsRebuild("conflict")
            if any(_holds_shared(c) for c in [*(self._claims[key] for key in gone), *new_claims]):
                # a sliced or MPS GPU is shared: its holder goes only with the last slice or share (a rebuild)
                raise NeedsRebuild("slices")
            if _ghosts(view, claims) != _ghosts_now(view):
                raise NeedsRebuild("topology")
            for claim in [self._claims[key] for key in gone] + new_claims:
                dirty |= {slot.node for slot in claim.record.pod_slots}
                dirty |= {self._gpu_pods[key].node for key in self._of_job.get(claim.key, ())}
        known = sorted(name for name in dirty if name in view.node_index)
        if view.empty:
            if known or gone or new_claims:
                raise NeedsRebuild("empty")
            return
        self._redo(view, known, gone, new_claims)
        self._claims = wanted

    def _repod(self, key: tuple[str, str]) -> set[str]:
        """Index the pod's new value; the nodes whose occupancy it may change."""
        info = self.pods.get(*key)
        old = self._gpu_pods.get(key)
        new = info if info is not None and info.holds_gpus else None
        if old == new:
            return set()
        if old is not None:
            self._unindex(key, old)
        if new is not None:
            self._index(key, new)
        return {pod.node for pod in (old, new) if pod is not None}

    def _index(self, key: tuple[str, str], pod: PodInfo) -> None:
        if not pod.holds_gpus:
            return
        self._gpu_pods[key] = pod
        self._on_node.setdefault(pod.node, set()).add(key)
        job = _job_key(pod)
        if job is not None:
            self._of_job.setdefault(job, set()).add(key)

    def _unindex(self, key: tuple[str, str], pod: PodInfo) -> None:
        del self._gpu_pods[key]
        self._on_node[pod.node].discard(key)
        job = _job_key(pod)
        if job is not None:
            self._of_job[job].discard(key)

    def _redo(self, view: ClusterView, dirty: list[str], gone: list[str], new_claims: list[Claim]) -> None:
        """Redo steps 2-4 of the rebuild on the dirty nodes, for the changed claims."""
        state, topology = view.state, view.topology
        for name in dirty:
            n = view.node_index[name]
            for gpu in topology.node_gpus(n):
                state.set_health(gpu, GPUHealth.HEALTHY)
            state.set_node_schedulable(n, True)
            for pod_key in view.occupants.pop(name, []):
                state.forget(occupant_id(pod_key))
            state.forget(claims_holder_id(name))
            view.node_warnings.pop(name, None)
        for key in gone:
            state.release(key)
            view.loaded.pop(key, None)
        for claim in new_claims:
            if not load_claim(view, claim):
                raise NeedsRebuild("conflict")
        for name in dirty:
            ordered = sorted(self._on_node.get(name, ()), key=self.pods.arrival)
            occupy_node(view, name, (self._gpu_pods[store_key] for store_key in ordered))
            hold_claimed_devices(view, name)
            apply_health(view, view.node_index[name])


def _holds_shared(claim: Claim) -> bool:
    """The claim holds GPUs that other claims' slices or shares may share; a record of the device plugin's
    MIG slices holds no GPU at all (``load_slices``), so it comes and goes like any claim."""
    record = claim.record
    return (record.sliced and not record.pooled) or record.shared


def _ghosts(view: ClusterView, claims: Sequence[Claim]) -> dict[str, int]:
    """The ghost nodes ``claims`` need, with their GPU counts, as ``build_view`` derives them."""
    counts: dict[str, int] = {}
    for claim in claims:
        for slot in claim.record.pod_slots:
            if slot.node not in view.nodes and slot.gpu_indices:
                counts[slot.node] = max(counts.get(slot.node, 0), max(slot.gpu_indices) + 1)
    return counts


def _ghosts_now(view: ClusterView) -> dict[str, int]:
    return {name: view.topology.node_gpu_count[view.node_index[name]] for name in view.ghosts}

"""Placement when the NVLink domain is a clique of trays (GB200/GB300 NVL72), not the node.

On such a topology (``Topology.nvlink_level`` > 0) a TP group must stay inside one NVLink domain, and a
job that uses NVLink across trays needs an IMEX channel: one ComputeDomain per clique, a tray in at most one
of them, so such a job takes whole trays. The placer routes every job through three tiers:

1. **Node-domain nodes first** (HGX: the node is the NVLink domain) when the TP group fits one: the core
   placer on those nodes alone, so free cliques stay whole for the TP groups larger than a node that only
   they can hold.
2. **One tray**: a job no larger than a tray goes on one tray of a clique (the core placer; a layout that
   would spread it over several trays takes one whole tray instead, step 3).
3. **Whole trays of cliques**: the job placed on the *clique topology* (``core/nvl72/cliques``), one node per
   clique with as many free GPUs as its whole free trays hold, less the clique's warm spares. This is the
   core placer's problem exactly: a TP group inside one clique-node is a TP group inside one NVLink domain,
   and two GPUs of different trays of one clique talk at the clique's bandwidth, which is what the clique
   topology's node level charges (pairs on one tray talk no slower; on NVL72 both are the same NVSwitch
   fabric). So its bounds, proofs and exact search carry over unchanged. Groups are then laid, in rank
   order, over the clique's whole free trays (those the job held before first), ``TP / GPUs-per-tray``
   whole trays per group when TP exceeds a tray.

Warm spares: ``spares`` whole free trays per clique take no new gang (tier 3 counts them out; tier 2 closes
them). A repair (``previous`` on cliques) may use them: each clique the job used keeps its groups when its
whole free trays (spares included) hold them, so a failed tray is replaced inside its clique and the
ComputeDomain follows; a clique short of spares sends only its broken TP groups to another clique's whole
free trays (``core/nvl72/traymoves``), and only when no clique holds them is the job placed afresh over all
cliques, spares included. The decision says which clique had no spare left. ``failurePolicy.strategy: full``
places the job afresh (``core/failure/repair`` passes no previous allocation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from paralleljob.core.cluster import Allocation, ClusterState, closed_nodes
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.nvl72.cliques import clique_index, nvlink_never_fits
from paralleljob.core.nvl72.traykeep import current_cliques, kept_trays, toward_current_cliques
from paralleljob.core.nvl72.traymoves import move_broken_groups
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import Placer, PlacerConfig
from paralleljob.core.rankorder import DEFAULT_RANK_ORDER, RankOrder, node_rank
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import node_level_cost
from paralleljob.core.topology import Topology


class CliqueState(ClusterState):
    """A state of counts only (no GPU owners) for the core placer: node i has ``free[i]`` free units. The
    clique topology's (whole free trays' GPUs / unit per clique) and the node-domain nodes' (their free GPUs)."""

    def __init__(self, derived: Topology, free: Sequence[int]) -> None:
        super().__init__(derived)
        self.set_free(free)

    def set_free(self, free: Sequence[int]) -> None:
        """Bring every clique-node to ``free`` units, touching only those that changed (a placer keeps one
        such state per unit and re-syncs it on each call, so a quiet cluster costs one pass of reads)."""
        current = self.node_free
        for i, count in enumerate(free):
            delta = count - current[i]
            if delta:
                self._change_node(i, free_delta=delta)


@dataclass(frozen=True)
class _ForJob:
    """A cost model that prices the real job whatever job it is handed: the clique topology's placer sees
    the job with TP counted in units (``TP / unit``), while bytes and ring sizes are the real job's."""

    model: CostModel
    job: JobSpec

    @property
    def name(self) -> str:
        return self.model.name

    def tp_ms(self, job: JobSpec, bandwidth: float) -> float:
        return self.model.tp_ms(self.job, bandwidth)

    def pp_ms(self, job: JobSpec, boundary_bandwidths: Sequence[float]) -> float:
        return self.model.pp_ms(self.job, boundary_bandwidths)

    def dp_ms(self, job: JobSpec, bandwidth: float) -> float:
        return self.model.dp_ms(self.job, bandwidth)

    def tp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        return self.model.tp_allreduces(self.job)

    def dp_allreduces(self, job: JobSpec) -> tuple[int, float]:
        return self.model.dp_allreduces(self.job)

    def combine(self, tp: float, pp: float, dp: float) -> float:
        return self.model.combine(tp, pp, dp)


def unit_for(tp: int, tray_gpus: Sequence[int]) -> int:
    """The largest count of GPUs dividing TP and every tray size that leaves at least 2 units per TP group
    (so the clique topology's placer still sees, and prices, a TP group of several members)."""
    common = tp
    for g in tray_gpus:
        common = math.gcd(common, g)
    if tp == 1:
        return 1
    return max(d for d in range(1, common + 1) if common % d == 0 and tp // d >= 2)


class NVLinkPlacer:
    """The placer for topologies with multi-node NVLink domains; the core placer where there are none."""

    def __init__(
        self,
        state: ClusterState,
        config: PlacerConfig | None = None,
        spares: int = 0,
        rank_order: RankOrder = DEFAULT_RANK_ORDER,
    ) -> None:
        self.rank_order = rank_order
        self.state = state
        self.topology = state.topology
        self.config = config or PlacerConfig()
        self.spares = max(0, spares)
        self.plain = Placer(state, self.config)
        self.index = clique_index(self.topology)
        self._states: dict[int, CliqueState] = {}  # the clique topology's state per unit, kept in sync

    # ---- counting -----------------------------------------------------------------------------------
    def whole_free_trays(self, i: int, memory_gb: float) -> list[int]:
        """Trays of clique i with every GPU free and schedulable, in node order."""
        idx = self.index
        return sorted(self.state.nodes_with_free(idx.level, idx.cliques[i], idx.tray_gpus[i], memory_gb))

    def whole_free_count(self, i: int, memory_gb: float) -> int:
        idx = self.index
        return self.state.free_histogram(idx.level, idx.cliques[i], memory_gb)[idx.tray_gpus[i]]

    def _clique_free(self, job: JobSpec, spares: int) -> list[int]:
        idx, mem = self.index, job.memory_per_gpu_gb
        out = []
        histogram, level, tp = self.state.free_histogram, idx.level, job.tp
        for dom, g in zip(idx.cliques, idx.tray_gpus, strict=True):
            if tp > g and tp % g:
                out.append(0)  # a TP group larger than a tray takes whole trays
                continue
            whole = histogram(level, dom, mem)[g]
            out.append((whole - spares) * g if whole > spares else 0)
        return out

    # ---- placement ----------------------------------------------------------------------------------
    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        if not self.index.cliques:
            return self.plain.place(job, model, previous)
        self._refuse_if_never(job)
        if previous is not None and self.spans_trays(previous):
            return self._repair(job, model, previous)
        return self._fresh(job, model, previous, None)

    def place_near(self, job: JobSpec, model: CostModel, current: Allocation) -> Placement:
        """Where ``job``, running on ``current`` (its GPUs counted as free), would go if placed now: the
        fresh placement (every tier open, not a repair), except that on whole trays it keeps the cliques and
        trays of ``current`` where that costs no more (``core/nvl72/traykeep``), so a move back names only the TP
        groups that must move."""
        if not self.index.cliques:
            return self.plain.place(job, model, current)
        self._refuse_if_never(job)
        # A question, not a placement: on scratch clique states, since syncing the kept ones to the job's
        # GPUs counted free and back lists their cliques in another order and changes the next tie-break
        # (the simulator's placements differed with and without re-optimisation before any move).
        kept, self._states = self._states, {}
        try:
            return self._fresh(job, model, None, current if self.spans_trays(current) else None)
        finally:
            self._states = kept

    def place_whole(self, job: JobSpec, model: CostModel, previous: Allocation) -> Placement:
        """A repair that restarts the whole gang (``failurePolicy.strategy: full``) of a job on ``previous``
        (released, its broken trays unhealthy): over trays, the best placement on every clique's whole free
        trays, warm spares included, since they are held for repairs, on the job's cliques and trays where that
        costs no more; any other job is repaired as ``place`` repairs it."""
        if not self.index.cliques or not self.spans_trays(previous):
            return self.place(job, model, previous)
        self._refuse_if_never(job)
        old_trays = list(dict.fromkeys(self.topology.gpu_node[g] for g in previous.gpus))
        note = "whole gang re-placed (strategy full), spare trays included"
        return self._on_cliques(job, model, self._clique_free(job, 0), old_trays, note, near=previous)

    def _refuse_if_never(self, job: JobSpec) -> None:
        permanent = nvlink_never_fits(self.topology, job)
        if permanent:
            raise PlacementInfeasible(job.job_id, permanent, permanent=True)

    def _fresh(
        self, job: JobSpec, model: CostModel, previous: Allocation | None, near: Allocation | None
    ) -> Placement:
        idx = self.index
        refusals: list[str] = []
        mem = job.memory_per_gpu_gb
        hgx_room = sum(self.state.node_slots(n, job.tp, mem) for n in idx.single_nodes)
        if hgx_room < job.num_groups:
            # Counted on the HGX nodes alone (few): closing every tray to learn the same costs O(trays).
            if idx.single_nodes:
                refusals.append(
                    f"nodes outside NVLink cliques: room for {hgx_room} of {job.num_groups} TP groups of {job.tp} GPUs"
                )
        else:
            try:
                placement = self._on_single_nodes(job, model, previous)
                note = "on nodes whose NVLink domain is the node: NVLink cliques kept whole for larger TP groups"
                return replace(placement, reasons=(*placement.reasons, note))
            except PlacementInfeasible as exc:
                refusals.extend(f"nodes outside NVLink cliques: {r}" for r in exc.reasons[:1])
        if job.num_gpus <= max(idx.tray_gpus):
            try:
                with closed_nodes(self.state, (*idx.single_nodes, *self._spare_trays(job.memory_per_gpu_gb))):
                    placement = self.plain.place(job, model, previous)
                if len(set(placement.group_nodes)) == 1:
                    return placement
            except PlacementInfeasible:
                pass
        try:
            return self._on_cliques(job, model, self._clique_free(job, self.spares), (), near=near)
        except PlacementInfeasible as exc:
            raise PlacementInfeasible(job.job_id, [*exc.reasons, *refusals]) from None

    def _on_single_nodes(self, job: JobSpec, model: CostModel, previous: Allocation | None) -> Placement:
        """Tier 1: the core placer on the node-domain nodes alone. A fresh placement solves on their own
        topology (its state synced from this one's free counts: O(such nodes), however many trays there
        are) and takes the GPUs here; a repair closes the trays instead, so the core placer sees the job's
        old GPUs (rare, and linear in the trays)."""
        idx = self.index
        if previous is not None:
            with closed_nodes(self.state, idx.clique_trays):
                return self.plain.place(job, model, previous)
        nodes = idx.single_nodes
        free = [self.state.usable_free(n) for n in nodes]
        sub = self._states.get(-1)
        if sub is None:
            sub = self._states[-1] = CliqueState(idx.single_topology(), free)
        else:
            sub.set_free(free)
        placed = Placer(sub, self.config).place(job, model)
        layout = tuple(nodes[n] for n in placed.group_nodes)
        groups = self.plain.choose_gpus(job, layout, None)
        return replace(placed, group_nodes=layout, groups=groups)

    def spans_trays(self, allocation: Allocation) -> bool:
        """Whether an allocation lies on more than one tray of multi-node cliques (needs a ComputeDomain)."""
        nodes = {self.topology.gpu_node[g] for g in allocation.gpus}
        return len(nodes) > 1 and all(self.index.clique_of(n) is not None for n in nodes)

    def held_back_gpus(self, memory_gb: float) -> int:
        """Free GPUs no new job may take: the warm spare trays' (``core.moveplan.HoldsBack``)."""
        if not self.spares:
            return 0
        idx = self.index
        return sum(min(self.spares, self.whole_free_count(i, memory_gb)) * g for i, g in enumerate(idx.tray_gpus))

    def _spare_trays(self, memory_gb: float) -> list[int]:
        """The trays held as warm spares: the last ``spares`` whole free trays of each clique."""
        if not self.spares:
            return []
        out: list[int] = []
        for i in range(len(self.index.cliques)):
            out.extend(self.whole_free_trays(i, memory_gb)[-self.spares :])
        return out

    def _on_cliques(
        self,
        job: JobSpec,
        model: CostModel,
        free: Sequence[int],
        prefer: Sequence[int],
        note: str = "",
        near: Allocation | None = None,
    ) -> Placement:
        """Tier 3: the clique topology's optimum, laid over whole trays (``prefer``: trays to take first;
        ``near``: a running job's GPUs, whose cliques and trays it keeps where that costs no more)."""
        unit_job, unit_model, placer = self._clique_placer(job, model, free)
        try:
            derived = placer.place(unit_job, unit_model)
        except PlacementInfeasible as exc:
            reasons = self._clique_refusal(job, free, exc)
            raise PlacementInfeasible(job.job_id, reasons, permanent=exc.permanent) from None
        cliques, kept = derived.group_nodes, {}
        now = current_cliques(self.topology, self.index, near) if near is not None else None
        if near is not None and now is not None:
            cliques = toward_current_cliques(placer.state, unit_job, unit_model, cliques, now)
            if cliques != derived.group_nodes:
                cost = node_level_cost(placer.topology, unit_job, cliques, unit_model)
                derived = replace(derived, group_nodes=cliques, cost=cost)
            kept = kept_trays(self.topology, self.index, job.tp, cliques, near)
        groups = self._lay_over_trays(job, cliques, prefer, kept)
        return self._finish(job, cliques, groups, derived, note)

    def _clique_placer(self, job: JobSpec, model: CostModel, free: Sequence[int]) -> tuple[JobSpec, _ForJob, Placer]:
        """The core placer on the clique topology, with ``free`` GPUs per clique, and the job in its units."""
        unit = unit_for(job.tp, self.index.tray_gpus)
        unit_job = replace(job, tp=job.tp // unit)
        units = [f // unit for f in free]
        state = self._states.get(unit)
        if state is None:
            state = self._states[unit] = CliqueState(self.index.derived(unit), units)
        else:
            state.set_free(units)
        return unit_job, _ForJob(model, job), Placer(state, self.config)

    def _finish(
        self,
        job: JobSpec,
        cliques: Sequence[int],
        groups: tuple[tuple[int, ...], ...],
        derived: Placement,
        note: str,
    ) -> Placement:
        """The placement in the real topology's terms; cost and bound are the clique topology's (exact
        for whole trays: see the module docstring)."""
        topo, idx = self.topology, self.index
        trays = {topo.gpu_node[g] for group in groups for g in group}
        names = sorted({idx.topology.domain_names[idx.level][idx.cliques[c]] for c in cliques})
        lines = [
            f"whole trays of NVLink cliques: {len(trays)} tray(s) in {len(names)} clique(s) ({', '.join(names[:4])}"
            f"{', ...' if len(names) > 4 else ''}); every TP group inside one clique",
            derived.reasons[0],
            *derived.reasons[2:],
        ]
        if note:
            lines.append(note)
        return Placement(
            job.job_id,
            job.pp,
            job.dp,
            tuple(topo.gpu_node[group[0]] for group in groups),
            groups,
            derived.cost,
            derived.lower_bound_ms,
            derived.proven_optimal,
            tuple(lines),
        )

    def _lay_over_trays(
        self,
        job: JobSpec,
        cliques: Sequence[int],
        prefer: Sequence[int],
        kept: dict[int, tuple[int, ...]] | None = None,
    ) -> tuple[tuple[int, ...], ...]:
        """GPUs for each group: per clique, its groups in rank order over its whole free trays, in order;
        a group in ``kept`` keeps those GPUs when they are among them."""
        mem, state = job.memory_per_gpu_gb, self.state
        first = {n: k for k, n in enumerate(prefer)}
        pools: dict[int, list[int]] = {}
        for c in dict.fromkeys(cliques):
            trays = sorted(self.whole_free_trays(c, mem), key=lambda n: (n not in first, first.get(n, 0), n))
            pools[c] = [g for n in trays for g in state.eligible_gpus(n, mem)]
        keep: dict[int, tuple[int, ...]] = {}
        for g, gpus in (kept or {}).items():
            pool = pools[cliques[g]]
            if all(x in pool for x in gpus):
                keep[g] = gpus
                pools[cliques[g]] = [x for x in pool if x not in set(gpus)]
        # Inside a clique every pair of trays talks at one bandwidth, so the order in which its groups take
        # the trays costs nothing: node-rank order makes each tray's ranks one block (core/nvl72/traypods).
        out: list[tuple[int, ...]] = [()] * len(cliques)
        taken = dict.fromkeys(pools, 0)
        pp, dp = job.pp, job.dp
        for g in sorted(range(len(cliques)), key=lambda g: node_rank(self.rank_order, g // pp, g % pp, pp, dp)):
            if g in keep:
                out[g] = keep[g]
                continue
            c = cliques[g]
            start = taken[c]
            out[g] = tuple(pools[c][start : start + job.tp])
            taken[c] = start + job.tp
        return tuple(out)

    def _clique_refusal(self, job: JobSpec, free: Sequence[int], exc: PlacementInfeasible) -> list[str]:
        idx, mem = self.index, job.memory_per_gpu_gb
        # exc counts in the clique topology's units; a permanent one only says the cliques alone never hold
        # the job (the whole cluster, node-domain nodes too, was judged before), so the words are the trays'.
        slots = sum(f // job.tp for f in free)
        roomiest = max(range(len(idx.cliques)), key=lambda i: (self.whole_free_count(i, mem), -i))
        g = idx.tray_gpus[roomiest]
        shape = f"{-(-job.tp // g)} whole free tray(s) of one clique" if job.tp > g else "one clique"
        spare = f", {self.spares} per clique held back as warm spares" if self.spares else ""
        return [
            f"needs {job.num_groups} TP groups of {job.tp} GPUs, each inside one NVLink domain ({shape});"
            f" the cliques' free trays hold {slots} such group(s) now",
            f"the roomiest clique has {self.whole_free_count(roomiest, mem)} whole free trays of {g} GPUs{spare}",
        ]

    def _replacements(self, old_trays: Sequence[int], memory_gb: float) -> tuple[dict[int, int], list[str]]:
        """Old tray -> the tray it runs on after the repair: itself when it is still whole and free, else a
        whole free tray of its clique that the job did not use (a spare), in order; and the cliques short of
        spares, in words. Only the failed trays' ranks move, so the other tray pods stay as they are."""
        topo, idx = self.topology, self.index
        by_clique: dict[int, list[int]] = {}
        for tray in old_trays:
            c = idx.clique_of(tray)
            if c is not None:
                by_clique.setdefault(c, []).append(tray)
        mapping: dict[int, int] = {}
        short: list[str] = []
        for c, trays in by_clique.items():
            whole = self.whole_free_trays(c, memory_gb)
            still = set(whole)
            spares = [n for n in whole if n not in set(trays)]
            broken = [t for t in trays if t not in still]
            if len(broken) > len(spares):
                name = topo.domain_names[idx.level][idx.cliques[c]]
                short.append(f"{name} ({len(broken)} tray(s) to replace, {len(spares)} free)")
                continue
            mapping.update({t: t for t in trays})
            mapping.update(zip(broken, spares, strict=False))
        return mapping, short

    # ---- repair ---------------------------------------------------------------------------------------
    def _remapped(
        self, job: JobSpec, model: CostModel, previous: Allocation, mapping: dict[int, int], kept: str, note: str
    ) -> Placement:
        """``previous`` with each old tray's GPUs taken to its new tray at the same offsets, priced."""
        topo, idx = self.topology, self.index
        first = topo.node_first_gpu
        groups = tuple(
            tuple(first[mapping[topo.gpu_node[x]]] + x - first[topo.gpu_node[x]] for x in group)
            for group in previous.groups
        )
        cliques = [idx.clique_of(topo.gpu_node[group[0]]) for group in groups]
        on = [c for c in cliques if c is not None]
        unit_job, unit_model, placer = self._clique_placer(job, model, self._clique_free(job, 0))
        cost = node_level_cost(placer.topology, unit_job, on, unit_model)
        bound = placer.lower_bound(unit_job, unit_model)
        proven = cost.total_ms <= bound + 1e-6
        lines: tuple[str, ...] = (kept, "", f"cost {cost.total_ms:.3f} ms")
        lines += ("proven optimal",) if proven else ()
        derived = Placement(job.job_id, job.pp, job.dp, tuple(on), groups, cost, bound, proven, lines)
        return self._finish(job, on, groups, derived, note)

    def _repair(self, job: JobSpec, model: CostModel, previous: Allocation) -> Placement:
        """Each clique keeps its groups when its whole free trays (spares too) hold them; else re-place."""
        topo, idx, mem = self.topology, self.index, job.memory_per_gpu_gb
        old_trays = list(dict.fromkeys(topo.gpu_node[g] for g in previous.gpus))
        cliques = [idx.clique_of(topo.gpu_node[group[0]]) for group in previous.groups]
        if len(cliques) == job.num_groups and all(c is not None for c in cliques):
            mapping, short = self._replacements(old_trays, mem)
            if not short:
                moved = ", ".join(f"{topo.node_names[a]} -> {topo.node_names[b]}" for a, b in mapping.items() if a != b)
                note = f"repaired inside its cliques{': ' + moved if moved else ''}"
                return self._remapped(job, model, previous, mapping, "every TP group kept in its clique", note)
            out_of_spares = f"no spare tray left in clique {', '.join(short)}"
            minimal = move_broken_groups(self, mem, previous)
            if minimal is not None:
                mapping, moves = minimal
                note = f"{out_of_spares}: only the broken TP groups moved ({'; '.join(moves)})"
                return self._remapped(job, model, previous, mapping, "healthy TP groups kept on their trays", note)
            note = f"{out_of_spares}: the job left its clique(s)"
        else:
            note = "its previous GPUs are not all on NVLink cliques: placed afresh"
        try:
            return self._on_cliques(job, model, self._clique_free(job, 0), old_trays, note)
        except PlacementInfeasible as exc:
            raise PlacementInfeasible(job.job_id, [note.split(":")[0], *exc.reasons]) from None


def make_placer(state: ClusterState, config: PlacerConfig | None = None, spares: int = 0) -> Placer | NVLinkPlacer:
    """The placer for ``state``: the NVLink placer when its topology names an NVLink level above the node."""
    if state.topology.nvlink_level > 0:
        return NVLinkPlacer(state, config, spares)
    return Placer(state, config)

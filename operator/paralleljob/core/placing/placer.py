"""Topology-aware gang placement: the cheapest valid placement under a cost model, then the tidiest.

Steps, each cheap at 100k GPUs:
1. Verdict from histograms: can this request ever fit, and does it fit now? A "no" names the numbers.
2. Candidates: one structured layout per DP level (``layouts``), plus "keep the previous placement where it
   still stands" when re-placing a job, each scored by the cost model at node level.
3. A lower bound per DP level; a candidate that meets it is proven optimal. Otherwise, when the cluster's
   usable nodes are few, the exact search (``search``) settles it.
4. Ties on cost (within ``COST_EPS``) go, in this order (``_score``), to the layout that moves the fewest
   TP groups (when re-placing), breaks the fewest whole free nodes, leaves the fewest free GPUs on the nodes
   it touches (fills partly used nodes), and spans the smallest domain.
5. With a level below the node (PCIe roots), a new placement's groups stay under one root where that costs
   nothing at node level, and each group's GPUs are taken under one root where one has room (``rootfit``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.eligibility import never_fits
from paralleljob.core.placing.layouts import CapacityCache, DomainPicker, Request, layouts_for_dp_level
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.rootfit import keep_groups_under_roots, pick_group
from paralleljob.core.placing.search import SearchResult, exact_search
from paralleljob.core.timing.cost import CostBreakdown, CostModel
from paralleljob.core.timing.evaluate import SingleMoveCost, node_level_cost, nodes_common_level

COST_EPS = 1e-6  # ms; costs closer than this are a tie


@dataclass(frozen=True, slots=True)
class PlacerConfig:
    exact_node_limit: int = 16  # run the exact search when at most this many nodes could take a group
    exact_group_limit: int = 24  # beyond this the search rarely finishes and the layouts are near-optimal
    exact_budget: int = 20_000  # search expansions (about 0.1 s); the structured layouts stand otherwise


# The operator's budget. The exact search (up to 24 TP groups, 20k expansions by default) can take most of a
# second on a mid-sized gang and rarely improves on the structured layouts; an operator that binds in well
# under a second gives it a small budget. The simulator's NVL72 policies place with it too.
OPERATOR_PLACER = PlacerConfig(exact_budget=1_000)


class Placer:
    def __init__(self, state: ClusterState, config: PlacerConfig | None = None) -> None:
        self.state = state
        self.topology = state.topology
        self.config = config or PlacerConfig()

    # ---- verdicts ---------------------------------------------------------------------------------
    def check_feasible(self, job: JobSpec) -> None:
        """Raise :class:`PlacementInfeasible` with reasons when the job cannot be placed now."""
        topo, state, t, mem = self.topology, self.state, job.tp, job.memory_per_gpu_gb
        permanent = never_fits(topo, job)
        if permanent:
            raise PlacementInfeasible(job.job_id, permanent, permanent=True)
        top = topo.top
        free_slots = state.domain_slots(top, 0, t, mem) if top else state.node_slots(0, t, mem)
        if free_slots < job.num_groups:
            row = state.free_histogram(top, 0, mem)
            best_node = max((k for k, c in enumerate(row) if c), default=0)
            memory = f" ({mem:g} GB per GPU)" if mem > 0 else ""
            raise PlacementInfeasible(
                job.job_id,
                [
                    f"needs {job.num_groups} TP groups of {t} GPUs, each inside one node{memory};"
                    f" {_free_groups(free_slots)}",
                    f"the best node has {best_node} free GPUs",
                ],
            )

    # ---- placement --------------------------------------------------------------------------------
    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        """The best placement for ``job`` on the current state; the state itself is not changed."""
        self.check_feasible(job)
        old_nodes = self._nodes_of(previous, job) if previous is not None else None
        scored: list[tuple[tuple[float, int, int, int, int], tuple[int, ...], str]] = []

        priced: dict[tuple[int, ...], CostBreakdown] = {}

        def consider(layout: Sequence[int], why: str) -> None:
            key = tuple(layout)
            priced[key] = node_level_cost(self.topology, job, key, model)
            scored.append((self._score(job, priced[key].total_ms, key, old_nodes), key, why))

        intact = self._intact_groups(job, previous) if previous is not None else None
        if old_nodes is not None:
            kept = self.keep_and_repair(job, model, old_nodes, intact)
            if kept is not None:
                consider(kept, "previous placement kept where it still stands")
        bounds = self.level_bounds(job, model)
        capacities: CapacityCache = {}  # of the untouched state, shared by every DP level and bound below
        # Cheapest-looking DP levels first; a level whose bound cannot beat the best layout found so far
        # is skipped without building anything.
        for bound_ms, lam in sorted((b, lam) for lam, b in bounds.items()):
            # A level that cannot be strictly cheaper than the best layout so far is not built.
            if scored and bound_ms >= min(scored)[0][0] - COST_EPS:
                break
            if scored and 0 < lam < self.topology.top:
                # Only worth its scan of the level's domains when it might save building layouts.
                bounds[lam] = bound_ms = self.domain_bound(job, model, lam, bound_ms, capacities)
                if bound_ms >= min(scored)[0][0] - COST_EPS:
                    continue
            why = (
                f"DP groups kept within one {self.topology.levels[lam].name}"
                if job.dp > 1
                else "no DP traffic; pipeline stages packed as close as they fit"
            )
            for layout in layouts_for_dp_level(self.state, job, lam, capacities):
                consider(layout, why)
                if scored[-1][0][0] <= bound_ms + COST_EPS:
                    break  # meets this level's bound: no other layout of the level is cheaper
        if not scored:
            raise PlacementInfeasible(job.job_id, ["no layout keeps every TP group inside one node"])
        _, best_layout, why = min(scored)
        if old_nodes is not None:
            best_layout = self.prefer_previous_nodes(job, model, best_layout, old_nodes)
        else:
            best_layout = keep_groups_under_roots(self.state, job, model, best_layout)
        best_cost = priced.get(tuple(best_layout)) or node_level_cost(self.topology, job, best_layout, model)
        for lam, lam_bound in list(bounds.items()):
            if 0 < lam < self.topology.top and lam_bound < best_cost.total_ms - COST_EPS:
                bounds[lam] = self.domain_bound(job, model, lam, lam_bound, capacities)
        bound = min(bounds.values())
        proven = best_cost.total_ms <= bound + COST_EPS
        notes = [why]
        if not proven:
            exact = self._exact(job, model, best_cost.total_ms)
            if exact is not None:
                if exact.group_nodes is not None:
                    best_layout = exact.group_nodes
                    best_cost = node_level_cost(self.topology, job, best_layout, model)
                    notes = ["exact search improved on the structured layouts"]
                if exact.complete:
                    proven = True
                    bound = best_cost.total_ms
        notes.extend(self._describe(job, best_layout, best_cost, bound, proven))
        groups = self.choose_gpus(job, best_layout, previous)
        return Placement(job.job_id, job.pp, job.dp, tuple(best_layout), groups, best_cost, bound, proven, tuple(notes))

    # ---- scoring ----------------------------------------------------------------------------------
    def _score(
        self, job: JobSpec, cost: float, layout: Sequence[int], old_nodes: Sequence[int] | None
    ) -> tuple[float, int, int, int, int]:
        moved = 0 if old_nodes is None else sum(1 for a, b in zip(layout, old_nodes, strict=True) if a != b)
        broken, leftover = self.fragmentation(job, layout)
        span = nodes_common_level(self.topology, layout)
        return (round(cost / COST_EPS) * COST_EPS, moved, broken, leftover, span)

    def fragmentation(self, job: JobSpec, layout: Sequence[int]) -> tuple[int, int]:
        """(whole free nodes left partly used, free GPUs left behind on the nodes touched)."""
        broken = leftover = 0
        for node, groups in Counter(layout).items():
            free = self.state.usable_free(node)
            left = free - groups * job.tp
            leftover += left
            if left > 0 and free == self.topology.node_gpu_count[node]:
                broken += 1
        return broken, leftover

    # ---- bounds and exact search --------------------------------------------------------------------
    def lower_bound(self, job: JobSpec, model: CostModel) -> float:
        """A cost no placement can beat (infinite when none is possible)."""
        return min(self.level_bounds(job, model).values(), default=math.inf)

    def level_bounds(self, job: JobSpec, model: CostModel) -> dict[int, float]:
        """For each DP level a layout could have, a cost no such layout can beat.

        Every replica needs at least ceil(pp / groups per node) nodes, so that many boundaries minus
        one leave a node; with DP inside one node, a node must hold whole stage columns, which forces
        more crossings. Levels that cannot hold a stage column at all are left out."""
        topo, state = self.topology, self.state
        bw = topo.level_bandwidth
        tp_ms = model.tp_ms(job, bw(0)) if job.tp > 1 else 0.0
        row = state.free_histogram(topo.top, 0, job.memory_per_gpu_gb) if topo.top else None
        max_slots = (
            max((k // job.tp for k, c in enumerate(row) if c), default=0)
            if row is not None
            else state.node_slots(0, job.tp, job.memory_per_gpu_gb)
        )
        crossing_bw = bw(1) if topo.top >= 1 else bw(0)

        def pp_bound(groups_per_node: int) -> float:
            if job.pp == 1:
                return 0.0
            crossings = min(job.pp - 1, math.ceil(job.pp / max(1, groups_per_node)) - 1)
            return model.pp_ms(job, [bw(0)] * (job.pp - 1 - crossings) + [crossing_bw] * crossings)

        if job.dp == 1:
            return {topo.top: model.combine(tp_ms, pp_bound(max_slots), 0.0)}
        bounds = {
            lam: model.combine(tp_ms, pp_bound(max_slots), model.dp_ms(job, bw(lam))) for lam in range(1, topo.top + 1)
        }
        if max_slots // job.dp >= 1:
            bounds[0] = model.combine(tp_ms, pp_bound(max_slots // job.dp), model.dp_ms(job, bw(0)))
        return bounds

    def domain_bound(
        self, job: JobSpec, model: CostModel, lam: int, bound_ms: float, cache: CapacityCache | None = None
    ) -> float:
        """A tighter bound for DP level ``lam``: every stage column sits inside one level-``lam`` domain,
        so a replica's chain crosses between such domains at least ceil(pp / most columns any domain
        holds) - 1 times, each at a level above ``lam``."""
        if job.pp == 1 or job.dp == 1:
            return bound_ms
        request = Request(job.tp, job.memory_per_gpu_gb)
        picker = DomainPicker(self.state, request, base_cache=cache if cache is not None else {})
        most = max((picker.capacity(lam, dom, lam, job.dp) for dom in range(self.topology.num_domains(lam))), default=0)
        if most == 0:
            return math.inf
        bw = self.topology.level_bandwidth
        row = self.state.free_histogram(self.topology.top, 0, job.memory_per_gpu_gb)
        max_slots = max((k // job.tp for k, c in enumerate(row) if c), default=0)
        in_node = min(job.pp - 1, math.ceil(job.pp / max(1, max_slots)) - 1)
        across = min(in_node, math.ceil(job.pp / most) - 1)
        boundaries = [bw(0)] * (job.pp - 1 - in_node) + [bw(1)] * (in_node - across) + [bw(lam + 1)] * across
        tp_ms = model.tp_ms(job, bw(0)) if job.tp > 1 else 0.0
        return max(bound_ms, model.combine(tp_ms, model.pp_ms(job, boundaries), model.dp_ms(job, bw(lam))))

    def usable_nodes(self, job: JobSpec, limit: int) -> list[int] | None:
        """Nodes that can take at least one TP group, or None when there are more than ``limit``."""
        topo, t, mem = self.topology, job.tp, job.memory_per_gpu_gb
        out: list[int] = []
        for free in range(t, topo.max_gpus_per_node + 1):
            nodes = self.state.nodes_with_free(topo.top, 0, free, mem) if topo.top else iter([0])
            for node in nodes:
                if self.state.node_slots(node, t, mem) > 0:
                    out.append(node)
                    if len(out) > limit:
                        return None
            if not topo.top:
                break
        return sorted(out)

    def _exact(self, job: JobSpec, model: CostModel, incumbent_ms: float) -> SearchResult | None:
        cfg = self.config
        if job.num_groups > cfg.exact_group_limit:
            return None
        nodes = self.usable_nodes(job, cfg.exact_node_limit)
        if nodes is None:
            return None
        slots = [self.state.node_slots(n, job.tp, job.memory_per_gpu_gb) for n in nodes]
        return exact_search(self.topology, job, model, nodes, slots, incumbent_ms, cfg.exact_budget)

    # ---- re-placement -------------------------------------------------------------------------------
    def _nodes_of(self, previous: Allocation, job: JobSpec) -> list[int] | None:
        if len(previous.groups) != job.num_groups:
            return None
        return [self.topology.gpu_node[group[0]] for group in previous.groups]

    def _intact_groups(self, job: JobSpec, previous: Allocation) -> list[bool] | None:
        if len(previous.groups) != job.num_groups:
            return None
        return [all(self.state.eligible(g, job.memory_per_gpu_gb) for g in group) for group in previous.groups]

    def keep_and_repair(
        self, job: JobSpec, model: CostModel, old_nodes: Sequence[int], intact: Sequence[bool] | None = None
    ) -> list[int] | None:
        """Intact groups stay where they are (even on a cordoned node: a cordon stops new work, not
        running work). A broken group stays on its node if the node still takes new work and has room,
        else it moves to the spare that raises the cost least, nearest first."""
        t, mem, state = job.tp, job.memory_per_gpu_gb, self.state
        pinned = [bool(intact[g]) if intact is not None else False for g in range(len(old_nodes))]
        pinned_on = Counter(node for node, pin in zip(old_nodes, pinned, strict=True) if pin)
        room: dict[int, int] = {}
        for node in set(old_nodes):
            free = state.usable_free(node) if state.memory_ok(node, mem) else 0
            if state.node_schedulable[node]:
                free -= pinned_on[node] * t  # their GPUs are free again after the release
            room[node] = max(0, free // t)
        moving = []
        for g, node in enumerate(old_nodes):
            if pinned[g]:
                continue
            if room[node] > 0:
                room[node] -= 1
            else:
                moving.append(g)
        pricing = SingleMoveCost(self.topology, job, old_nodes, model)
        together = self._together(job, model, old_nodes, moving, room) if len(moving) > 1 else None
        for g in moving:
            target = self.best_replacement(job, pricing, g, room)
            if target is None:
                return None
            pricing.apply(g, target)
            room[target] = room.get(target, state.node_slots(target, t, mem)) - 1
        if together is not None and together[0] <= node_level_cost(self.topology, job, pricing.layout, model).total_ms:
            return together[1]
        return pricing.layout

    def _together(  # params: the repair's own state, passed down from keep_and_repair
        self,
        job: JobSpec,
        model: CostModel,
        old_nodes: Sequence[int],
        moving: Sequence[int],
        room: dict[int, int],
        fanout: int = 8,
    ) -> tuple[float, list[int]] | None:
        """The moving groups all on one node, the cheapest such node near their old one: taken when it costs
        no more than spreading them one by one. The cost model prices a ring by its slowest link, so it cannot
        tell one node holding them from several; the collectives can (NCCL's cross-node ring runs over each
        node's NICs, and a node holding one rank of it has one: 11x slower in issue 43's case)."""
        topo, t, mem = self.topology, job.tp, job.memory_per_gpu_gb
        need, anchor = len(moving), old_nodes[moving[0]]
        for level in range(1, topo.top + 1) if topo.top else [0]:
            domain = topo.domain_of[level][anchor]
            options: list[int] = []
            for free in range(t * need, topo.max_gpus_per_node + 1):  # tightest first, as best_replacement
                for node in self.state.nodes_with_free(level, domain, free, mem):
                    if room.get(node, self.state.node_slots(node, t, mem)) >= need:
                        options.append(node)
                    if len(options) >= fanout:
                        break
                if len(options) >= fanout:
                    break
            if options:
                best: tuple[float, int, int, list[int]] | None = None
                for node in options:
                    layout = list(old_nodes)
                    for g in moving:
                        layout[g] = node
                    cost = node_level_cost(topo, job, layout, model).total_ms
                    key = (round(cost / COST_EPS) * COST_EPS, self.state.usable_free(node), node, layout)
                    if best is None or key[:3] < best[:3]:
                        best = key
                assert best is not None
                return best[0], best[3]
        return None

    def best_replacement(
        self, job: JobSpec, pricing: SingleMoveCost, g: int, room: dict[int, int], fanout: int = 8
    ) -> int | None:
        """The node for group ``g`` that keeps the job cheapest, searched outward from its old domain."""
        topo, t, mem = self.topology, job.tp, job.memory_per_gpu_gb
        anchor = pricing.layout[g]
        for level in range(1, topo.top + 1) if topo.top else [0]:
            domain = topo.domain_of[level][anchor]
            options: list[int] = []
            for free in range(t, topo.max_gpus_per_node + 1):
                for node in self.state.nodes_with_free(level, domain, free, mem):
                    if room.get(node, self.state.node_slots(node, t, mem)) > 0:
                        options.append(node)
                        if len(options) >= fanout:
                            break
                if len(options) >= fanout:
                    break
            options.extend(
                n for n, r in room.items() if r > 0 and n not in options and topo.common_level(n, anchor) <= level
            )
            if options:
                return min(options, key=lambda node: self._repair_key(job, pricing, g, node, room))
        return None

    def _repair_key(
        self, job: JobSpec, pricing: SingleMoveCost, g: int, node: int, room: dict[int, int]
    ) -> tuple[float, int, int, int, int]:
        """Cheapest first; among equal costs a node the job already uses, then one that does not break a
        whole free node, then the tightest fit (SPEC: fill partly used nodes, keep whole nodes free)."""
        cost = round(pricing.with_move(g, node) / COST_EPS)
        free = self.state.usable_free(node)
        own = 0 if node in room else 1
        breaks_whole = int(own and free == self.topology.node_gpu_count[node] and free > job.tp)
        return (cost, own, breaks_whole, free, node)

    def prefer_previous_nodes(
        self, job: JobSpec, model: CostModel, layout: Sequence[int], old_nodes: Sequence[int]
    ) -> tuple[int, ...]:
        """Move groups back to the node they came from when that costs nothing, so that a re-placement
        moves as few ranks as possible (equal-cost layouts differ only in which free node they name)."""
        pricing = SingleMoveCost(self.topology, job, layout, model)
        current = pricing.layout
        best = node_level_cost(self.topology, job, current, model).total_ms
        on_node: dict[int, list[int]] = {}
        for g, node in enumerate(current):
            on_node.setdefault(node, []).append(g)
        used = set(current)
        for node, groups in list(on_node.items()):
            origins = {old_nodes[g] for g in groups}
            if len(origins) != 1:
                continue
            origin = origins.pop()
            if origin == node or origin in used:
                continue
            if self.state.node_slots(origin, job.tp, job.memory_per_gpu_gb) < len(groups):
                continue
            if len(groups) == 1:
                cost = pricing.with_move(groups[0], origin)
            else:
                trial = current.copy()
                for g in groups:
                    trial[g] = origin
                cost = node_level_cost(self.topology, job, trial, model).total_ms
            if cost <= best + COST_EPS:
                for g in groups:
                    pricing.apply(g, origin)
                best = min(best, cost)
                used.discard(node)
                used.add(origin)
        return tuple(current)

    # ---- GPUs ---------------------------------------------------------------------------------------
    def choose_gpus(
        self, job: JobSpec, layout: Sequence[int], previous: Allocation | None
    ) -> tuple[tuple[int, ...], ...]:
        mem = job.memory_per_gpu_gb
        free: dict[int, list[int]] = {}
        for node in dict.fromkeys(layout):
            free[node] = self.state.eligible_gpus(node, mem)
        groups: list[tuple[int, ...] | None] = [None] * len(layout)
        if previous is not None and len(previous.groups) == len(layout):
            for g, node in enumerate(layout):
                old = previous.groups[g]
                if all(gpu in free[node] for gpu in old) and len(old) == job.tp:
                    groups[g] = old
                    for gpu in old:
                        free[node].remove(gpu)
        for g, node in enumerate(layout):
            if groups[g] is None:
                picked = pick_group(self.topology, free[node], job.tp)
                groups[g] = picked
                for gpu in picked:
                    free[node].remove(gpu)
        return tuple(group for group in groups if group is not None)

    def _describe(
        self, job: JobSpec, layout: Sequence[int], cost: CostBreakdown, bound: float, proven: bool
    ) -> list[str]:
        topo = self.topology
        nodes = len(set(layout))
        span = topo.levels[nodes_common_level(topo, layout)].name
        lines = [
            f"{job.describe()} on {nodes} node(s) within one {span}",
            f"cost {cost.total_ms:.3f} ms (tp {cost.tp_ms:.3f}, pp {cost.pp_ms:.3f}, dp {cost.dp_ms:.3f});"
            f" bottleneck {cost.bottleneck}",
        ]
        lines.append("proven optimal" if proven else f"within {cost.total_ms - bound:.3f} ms of the lower bound")
        return lines


def _free_groups(count: int) -> str:
    """'only 1 such group is free now' / 'only 3 such groups are free now' / 'no such group is free now'."""
    if count == 0:
        return "no such group is free now"
    return f"only {count} such group is free now" if count == 1 else f"only {count} such groups are free now"

"""Freeing a domain for a waiting job by moving running jobs at their checkpoints, not by stopping them.

A job that fits no domain only because the free GPUs are scattered (enough of them in all, too few together)
gets a :class:`MovePlan`: the running jobs in the way are each re-placed elsewhere, no dearer than their
current placement times ``1 + max_extra_cost_ratio``, at once when the work they lose (GPUs x time since their
last checkpoint) is under ``move_now_max_lost_gpu_s``, else right after their next checkpoint (nothing lost),
or not at all when they end before it (the plan waits for them). The GPUs the waiting job will take are held:
the shell keeps everything else off them until it starts. Never a job of higher priority than the waiting
one, never one moved within ``cooldown_s``, never more than ``max_moves_per_hour`` (with the moves of the past
hour), never onto GPUs held for another waiting job. When there is no plan, :class:`NoMovePlan` says why.

The search follows domain-freeing preemption (``core/admit/preemption``): each domain of each level is a candidate;
its nodes are freed cheapest first (a node's price: the work its jobs would lose, or their GPUs x the time
until they can move without loss) until the waiting job fits inside that domain, tried on the real state
inside a trial (``ClusterState.begin_trial``, rolled back), then trimmed of moves it does not need. The
narrowest level with a plan wins (the job then runs inside one NVLink clique or rack, not over two for fewer
moves), and in it the cheapest plan, then the one that touches fewest jobs. ``relocate=False`` stops the
jobs in the way instead of moving them (what a preempting scheduler does; the simulator's baseline): same
search, no placement elsewhere.

Pure and synchronous: the operator and the simulator hand in values and carry out the plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paralleljob.core.cluster import Allocation, ClusterState, closed_nodes
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.moveplan import (
    MovableJob,
    Move,
    MoveBounds,
    MovePlan,
    MoveRequest,
    MoveWhen,
    NoMovePlan,
    eligibility,
    ending_soon_gpus,
    move_timing,
    place_elsewhere,
    usable_free,
    within_bound,
)
from paralleljob.core.placing import domainview
from paralleljob.core.placing.domainview import InsideAsker, PlacerFor, could_hold, domain_members
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import CostModel

DOMAINS_PER_LEVEL = 8  # candidate domains tried per level, cheapest first
TRIM_TRIES = 3  # moves a found plan tries to do without

# The shells import the planner and its values from here alone (the values live in core/moveplan)
__all__ = [
    "MovableJob", "Move", "MoveBounds", "MovePlan", "MoveRequest", "MoveWhen", "NoMovePlan", "place_elsewhere",
    "plan_moves",
]  # fmt: skip


class _Search:
    """One planning: the request, the state (changed only inside trials), the placer and cost model."""

    def __init__(
        self, state: ClusterState, placer: PlacerLike, model: CostModel, request: MoveRequest,
        placer_for: PlacerFor | None = None, narrow: bool = True,
    ) -> None:  # fmt: skip
        self.state, self.placer, self.model, self.request = state, placer, model, request
        self.inside = InsideAsker(state, placer, model, placer_for, narrow)
        self.by_id = {j.job_id: j for j in request.running if j.job_id in state.allocations}
        self.refused: dict[str, str] = {}
        self.eligible: dict[str, tuple[MoveWhen, float, float, float]] = {}
        for job_id, job in self.by_id.items():
            why = eligibility(job, request)
            timing = move_timing(job, request)
            if why is None and timing[1] - request.now > request.bounds.max_wait_s:
                why = (
                    f"{job_id} could move only in {(timing[1] - request.now) / 60:.0f} min"
                    f" (more than {request.bounds.max_wait_s / 60:.0f})"
                )
            if why is None:
                self.eligible[job_id] = timing
            else:
                self.refused[job_id] = why
        self.failures: list[str] = []
        self.tried: dict[tuple[frozenset[str], tuple[int, ...]], tuple[tuple[Move, ...], Placement] | None] = {}

    def trial(
        self, victims: Sequence[str], inside: Sequence[int], level: int
    ) -> tuple[tuple[Move, ...], Placement] | None:
        """Move (or stop) ``victims`` and place the waiting job on the nodes ``inside`` (the level-``level``
        domain being freed), inside a trial rolled back after (once per set and domain)."""
        key = (frozenset(victims), tuple(inside))
        if key not in self.tried:
            self.tried[key] = self._trial(victims, inside, level)
        return self.tried[key]

    def _trial(
        self, victims: Sequence[str], inside: Sequence[int], level: int
    ) -> tuple[tuple[Move, ...], Placement] | None:
        state, request = self.state, self.request
        # Nodes listed as before after the rollback: a try changes no later tie-break, asked alone or not
        state.begin_trial(keep_order=True)
        try:
            for v in victims:
                state.release(v)
            # The waiting job's nodes are unknown until it is placed, so victims avoid the nodes they leave.
            left = sorted({state.topology.gpu_node[g] for v in victims for g in self.gpus(v)})
            avoid = sorted({*left, *request.held_nodes})
            moves: list[Move] = []
            for v in sorted(victims, key=lambda v: (-self.by_id[v].job.num_gpus, v)):
                moves.append(self._move(v, avoid))
                if moves[-1].placement is None and moves[-1].when is not MoveWhen.AT_END and request.relocate:
                    return None
            placement = self.inside.place(request.waiting, request.held_nodes, inside, level)
            if placement is None:
                return None
            return tuple(sorted(moves, key=lambda m: (m.at_s, m.job_id))), placement
        finally:
            state.rollback()

    def gpus(self, job_id: str) -> tuple[int, ...]:
        return self._allocations[job_id].gpus

    def _move(self, job_id: str, avoid: Sequence[int]) -> Move:
        job = self.by_id[job_id]
        when, at, lost, _ = self.eligible[job_id]
        if not self.request.relocate or when is MoveWhen.AT_END:
            return Move(job_id, when, at, lost, None, job.cost_ms, job.cost_ms)
        with closed_nodes(self.state, (*avoid, *job.keep_off)):
            try:
                placement = self.placer.place(job.job, self.model)
            except PlacementInfeasible as exc:
                self.failures.append(f"{job_id} has no placement elsewhere: {exc.reasons[0] if exc.reasons else ''}")
                return Move(job_id, when, at, lost, None, job.cost_ms, math.inf)
        if not within_bound(job.cost_ms, placement.cost.total_ms, self.request.bounds):
            self.failures.append(
                f"{job_id} would cost {placement.cost.total_ms:.3f} ms elsewhere, above"
                f" {1 + self.request.bounds.max_extra_cost_ratio:g}x its {job.cost_ms:.3f} ms"
            )
            return Move(job_id, when, at, lost, None, job.cost_ms, placement.cost.total_ms)
        self.state.allocate(Allocation(job_id, placement.groups, job.job.memory_per_gpu_gb))
        return Move(job_id, when, at, lost, placement, job.cost_ms, placement.cost.total_ms)

    def prepare(self) -> None:
        state, topo = self.state, self.state.topology
        self._allocations = {j: state.allocations[j] for j in self.by_id}
        on: dict[int, set[str]] = {}
        # GPUs per node that no move can free: a held or cordoned node's, those of jobs that may not move
        stuck: dict[int, int] = {n: topo.node_gpu_count[n] for n in self.request.held_nodes}
        stuck.update((n, topo.node_gpu_count[n]) for n, ok in enumerate(state.node_schedulable) if not ok)
        for job_id, allocation in state.allocations.items():
            for g in allocation.gpus:
                node = topo.gpu_node[g]
                on.setdefault(node, set()).add(job_id)
                if job_id not in self.eligible and stuck.get(node, 0) < topo.node_gpu_count[node]:
                    stuck[node] = stuck.get(node, 0) + 1
        self._jobs_on_node = on
        self._stuck = stuck

    def nodes_of(self, level: int, domain: int) -> tuple[int, ...]:
        return domain_members(self.state.topology, level)[domain]

    def at_most(self, level: int) -> list[int]:
        """Per domain of ``level``: the most GPUs moves could leave free there (its GPUs less those no move
        frees), an upper bound of what :meth:`domain` counts, so a domain below the job's need is passed
        over without looking at its nodes."""
        return domainview.room_at_most(self.state.topology, level, self._stuck)

    def domain(self, level: int, domain: int) -> tuple[int, list[tuple[float, int, tuple[str, ...]]]]:
        """The GPUs of the domain's whole free nodes, and the nodes moves could free cheapest first:
        (price, node, its jobs), a node only when every job on it may move."""
        state, topo = self.state, self.state.topology
        held = self.request.held_nodes
        whole = 0
        units = []
        for node in self.nodes_of(level, domain):
            if node in held or not state.node_schedulable[node]:
                continue
            jobs = self._jobs_on_node.get(node)
            if not jobs:
                whole += state.usable_free(node) if state.usable_free(node) == topo.node_gpu_count[node] else 0
                continue
            if any(j not in self.eligible for j in jobs):
                continue
            units.append((math.fsum(self.eligible[j][3] for j in jobs), node, tuple(sorted(jobs))))
        units.sort()
        return whole, units


def plan_moves(
    state: ClusterState, placer: PlacerLike, model: CostModel, request: MoveRequest,
    placer_for: PlacerFor | None = None, narrow: bool = True,
) -> MovePlan | NoMovePlan:  # fmt: skip
    """The cheapest plan that frees room for ``request.waiting``, or why there is none. ``state`` is changed
    only inside trials and left as it was, the order of its nodes' lists included (call it outside any other
    trial). ``placer_for`` (a placer like ``placer`` over another state): each try places the waiting job on
    the candidate domain alone, so a try costs the domain's size, not the cluster's (``narrow=False``: on the
    whole state with the rest closed, the same answer; the property tests compare them)."""
    waiting, bounds = request.waiting, request.bounds
    held = sorted(request.held_nodes)

    def no(*reasons: str) -> NoMovePlan:
        return NoMovePlan(waiting.job_id, tuple(r for r in reasons if r))

    state.begin_trial(keep_order=True)  # the held nodes closed for the question, then listed as before
    try:
        with closed_nodes(state, held):
            free = usable_free(state, placer, waiting)
            placer.place(waiting, model)
            return no("it fits now: nothing needs to move")
    except PlacementInfeasible as exc:
        if exc.permanent:
            return no("it never fits this cluster", *exc.reasons[:1])
    finally:
        state.rollback()
    ending = ending_soon_gpus(request)
    if free + ending < waiting.num_gpus:
        return no(
            f"only {free} GPUs are free (not held, no warm spare) of the {waiting.num_gpus} it needs, and jobs"
            f" expected to end within {bounds.max_wait_s / 60:.0f} min hold {ending} more:"
            " moving jobs frees none, only ends and stops do"
        )
    budget = bounds.max_moves_per_hour - request.moves_last_hour
    if budget <= 0:
        return no(
            f"the disruption budget is spent: {request.moves_last_hour} move(s) in the past hour,"
            f" {bounds.max_moves_per_hour} allowed"
        )
    search = _Search(state, placer, model, request, placer_for, narrow)
    if not search.eligible:
        refused = sorted(search.refused.values())
        return no("no running job may be moved", *refused[:3], _more(len(refused) - 3))
    search.prepare()
    best: tuple[float, int, MovePlan] | None = None
    over_budget = 0
    topo = state.topology
    need = waiting.num_gpus
    for level in range(topo.top + 1):
        ranked = []
        for dom, most in enumerate(search.at_most(level)):
            if most < need:
                continue  # even with every movable job gone it holds too few GPUs
            whole, units = search.domain(level, dom)
            estimate, room = 0.0, whole
            for unit_price, node, _ in units:
                if room >= need:
                    break
                room += topo.node_gpu_count[node]
                estimate += unit_price
            if units and room >= need:  # the domain alone can hold it once freed: others are left to wider levels
                ranked.append((estimate, dom, whole, units))
        ranked.sort(key=lambda r: (r[0], r[1]))
        for estimate, dom, whole, units in ranked[:DOMAINS_PER_LEVEL]:
            if best is not None and estimate > best[0]:
                break
            found = _free_domain(search, level, search.nodes_of(level, dom), whole, units, budget)
            if found is None:
                continue
            moves, placement = found
            if len(moves) > budget:
                over_budget += 1
                continue
            moved = sum(1 for m in moves if m.when is not MoveWhen.AT_END)
            price = math.fsum(search.eligible[m.job_id][3] for m in moves)
            name = topo.domain_names[level][dom] if level else topo.node_names[dom]
            plan = _plan(request, f"{topo.levels[level].name} {name}", moves, placement, state, moved)
            if best is None or (price, len(moves)) < (best[0], best[1]):
                best = (price, len(moves), plan)
        if best is not None:
            # The narrowest level that can be freed wins: a wider domain lets the job start over two cliques
            # (or racks) for fewer moves, and its steps then pay the slow level for as long as it runs.
            return best[2]
    refused = sorted(search.refused.values())
    return no(
        "no domain can be freed for it within the bounds",
        f"{over_budget} plan(s) need more moves than the {max(budget, 0)} the budget has left"
        f" ({bounds.max_moves_per_hour} per hour)"
        if over_budget
        else "",
        *sorted(set(search.failures))[:3],
        *refused[:3],
    )


def _more(n: int) -> str:
    return f"and {n} more" if n > 0 else ""


def _free_domain(
    search: _Search,
    level: int,
    nodes: Sequence[int],
    whole: int,
    units: Sequence[tuple[float, int, tuple[str, ...]]],
    budget: int,
) -> tuple[tuple[Move, ...], Placement] | None:
    """Free the domain's ``nodes`` cheapest first until the waiting job fits in it (tried once the freed nodes
    could hold it), then drop the moves it does not need, dearest first."""
    topo, need = search.state.topology, search.request.waiting.num_gpus
    victims: list[str] = []
    found = None
    room = whole
    for _, node, jobs in units:
        victims.extend(j for j in jobs if j not in victims)
        room += topo.node_gpu_count[node]
        if len(victims) > budget:
            search.failures.append(f"freeing room needs more than the {budget} move(s) the budget has left")
            return None
        if room < need:
            continue
        found = search.trial(victims, nodes, level)
        if found is not None:
            break
    if found is None:
        return None
    # the dearest few only: each try is a whole trial, and the cheapest-first order rarely takes a useless one
    for v in sorted(victims, key=lambda v: (-search.eligible[v][3], v))[:TRIM_TRIES]:
        fewer = [x for x in victims if x != v]
        # A found plan is the answer of this level whatever a trim says, so one that cannot fit is not tried
        held, waiting = search.request.held_nodes, search.request.waiting
        if fewer and could_hold(search.state, waiting.num_gpus, held, [search.gpus(x) for x in fewer], nodes):
            trimmed = search.trial(fewer, nodes, level)
            if trimmed is not None:
                victims, found = fewer, trimmed
    return found


def _plan(
    request: MoveRequest, domain: str, moves: tuple[Move, ...], placement: Placement, state: ClusterState, moved: int
) -> MovePlan:
    topo = state.topology
    held = tuple(sorted({topo.gpu_node[g] for g in placement.gpus}))
    lost = math.fsum(m.lost_work_gpu_s for m in moves)
    ready = max((m.at_s for m in moves), default=request.now)
    verb = "moves" if request.relocate else "stops"
    parts = [f"{m.job_id} {_when(m, request.now)}" for m in moves]
    reasons = (
        f"waits for {len(moves)} job(s) to free {domain} ({moved} {verb}, {len(moves) - moved} end first):"
        f" {', '.join(parts)}",
        f"loses {lost:.0f} GPU-seconds of work; ready in ~{max(0.0, ready - request.now) / 60:.0f} min",
    )
    return MovePlan(request.waiting.job_id, domain, held, moves, placement, ready, lost, reasons)


def _when(move: Move, now: float) -> str:
    if move.when is MoveWhen.NOW:
        return "now"
    what = "at its checkpoint" if move.when is MoveWhen.AT_CHECKPOINT else "ends"
    return f"{what} in ~{max(0.0, move.at_s - now) / 60:.0f} min"

"""Elastic data parallelism: a job whose DP size is a range, counted in model replicas (TP x PP GPUs each).

Every decision about an elastic job's size is made here, as a value, for both shells (the operator's pass
and the simulator) to carry out:

- :func:`admission_size`: admit at the largest size from the desired one down to min that places now (never
  below min). ``gpu_room`` caps it (a queue's quota or fair-share headroom), so quotas count what it holds.
  :func:`place_largest` is the same as a placer call (raises when min does not fit): both admission paths,
  the FIFO one and the queue policies' pass (``core/admit/admission.py``), call it.
- :func:`plan_growth`: add replicas one at a time while free room lets, each placed next to the existing
  replicas (stage ``p`` of the new replica goes to the node of stage ``p`` of the last replica when it has
  room, else to the spare that raises the cost least, searched outward from there: the placer's repair
  search). The existing replicas never move. Growth stops when a rigid job at equal or higher priority waits
  (those GPUs are its: :func:`growth_blocker` over the shell's :func:`rigid_line`), and see
  :func:`worth_adding` for a replica that widens the DP ring. Both shells grow a running job before the
  pass's admissions, so a lower-priority waiting job never takes the GPUs a higher-priority one grows into.
- :func:`shrink_for`: preemption of the cheapest kind: growth replicas (those above min), highest replica
  first, lowest-priority job first, taken until the waiting job places; only then would whole gangs go. Which
  running jobs are offered: :func:`offers_growth_replicas`; which waiting jobs may take them (rigid ones, and
  elastic ones where whole gangs would go next): :func:`takes_growth_replicas`.
- :func:`min_gpus`: what an elastic job's queue cap and the free count must allow before it is placed.
- :func:`drop_broken`: a replica on broken hardware with no room to repair it is dropped when the job stays
  at or above min; the kept replicas keep their GPUs and are renumbered in order (``None`` below min: the
  failure policy applies as for a rigid job).

The rule for a replica whose DP traffic crosses a slower level than the job's widest now (:func:`worth_adding`):
one step takes ``compute + exposed communication`` (the step-time model in ``steptime``) and processes one
micro-batch set per replica, so throughput is ``replicas / step_ms``. The replica is added only when
``(k+1) / step_ms(k+1 at the new cost) > k / step_ms(k at today's cost)``: the whole ring runs at the slowest
link, so the cost of crossing is paid by every replica on every step, and a replica that does not pay for it
is left out (the job stays below max and its status says why). A replica that stays within the job's widest
level is always worth adding: its ring already runs at that level's bandwidth.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.errors import InvalidRequest, PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.placing.placer import Placer
from paralleljob.core.placing.rootfit import pick_group
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import node_level_cost, nodes_common_level

Groups = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class ElasticRange:
    """``spec.parallelism``'s ``minData``..``maxData``, and ``data``, the size asked for now (``kubectl scale``)."""

    min: int
    max: int
    desired: int

    def __post_init__(self) -> None:
        for name in ("min", "max", "desired"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequest(f"elastic {name} replicas must be an integer >= 1, got {value!r}")
        if self.min > self.max:
            raise InvalidRequest(f"parallelism.minData {self.min} is above maxData {self.max}")
        if not self.min <= self.desired <= self.max:
            raise InvalidRequest(
                f"parallelism.data {self.desired} is outside the elastic range minData..maxData ="
                f" {self.min}..{self.max}"
            )


class ResizeKind(enum.StrEnum):
    ADMIT = "Admitted"
    GROW = "Grew"
    SHRINK = "Shrank"  # preempted replicas: the cheapest kind of preemption
    DROP = "DroppedReplica"  # lost hardware, no room to repair


@dataclass(frozen=True, slots=True)
class Resize:
    job_id: str
    kind: ResizeKind
    before: int  # replicas
    after: int
    groups: Groups  # the job's whole allocation after the resize, flat index d * pp + p
    reasons: tuple[str, ...]


class StepTime(Protocol):
    def step_ms(self, job: JobSpec, comm_ms: float) -> float: ...


def resized(job: JobSpec, dp: int) -> JobSpec:
    return dataclasses.replace(job, dp=dp)


def min_gpus(job: JobSpec, rng: ElasticRange) -> int:
    """The GPUs an elastic job is guaranteed, all its queue's cap and the free count must allow for it to be
    admitted: ``rng.min`` replicas of ``tp x pp`` (``job`` at any size)."""
    return job.tp * job.pp * rng.min


def dp_level(state: ClusterState, job: JobSpec, groups: Groups) -> int:
    """The widest level any stage's DP ring crosses (0 with one replica or all on one node)."""
    node = state.topology.gpu_node
    pp = job.pp
    return max(
        (nodes_common_level(state.topology, (node[groups[d * pp + p][0]] for d in range(len(groups) // pp)))
         for p in range(pp)),
        default=0,
    )


# ---- admission ----------------------------------------------------------------------------------------
def admission_size(
    state: ClusterState,
    placer: PlacerLike,
    job: JobSpec,
    rng: ElasticRange,
    model: CostModel,
    gpu_room: int | None = None,
) -> tuple[Placement | None, tuple[str, ...]]:
    """The placement at the largest size from ``rng.desired`` down to ``rng.min`` that fits now, with why it
    is not larger; ``None`` (and the reasons) when not even min fits."""
    per = job.tp * job.pp
    top = state.topology.top
    slots = state.domain_slots(top, 0, job.tp, job.memory_per_gpu_gb) if top else state.node_slots(
        0, job.tp, job.memory_per_gpu_gb)
    high = min(rng.desired, slots // job.pp)
    why: list[str] = []
    if high < rng.desired:
        why.append(f"only {slots} free TP groups of {job.tp} GPUs: room for {max(high, 0)} replica(s)")
    if gpu_room is not None and gpu_room // per < high:
        high = gpu_room // per
        why.append(f"the queue has room for {gpu_room} more GPUs: {max(high, 0)} replica(s) of {per}")
    for size in range(high, rng.min - 1, -1):
        try:
            placement = placer.place(resized(job, size), model)
        except PlacementInfeasible as exc:
            why.append(f"{size} replica(s) do not place: {'; '.join(exc.reasons)}")
            continue
        note = f"admitted at {size} of {rng.min}..{rng.max} replicas (desired {rng.desired})"
        return placement, (note, *why)
    return None, (f"not even the minimum of {rng.min} replica(s) fits now", *why)


def place_largest(
    state: ClusterState,
    placer: PlacerLike,
    job: JobSpec,
    rng: ElasticRange,
    model: CostModel,
    gpu_room: int | None = None,
) -> tuple[Placement, tuple[str, ...]]:
    """:func:`admission_size` as a placer call: the placement and why it has that size (the first two
    reasons); :class:`PlacementInfeasible` with every reason when not even min fits."""
    placement, reasons = admission_size(state, placer, job, rng, model, gpu_room)
    if placement is None:
        raise PlacementInfeasible(job.job_id, list(reasons))
    return placement, reasons[:2]


# ---- growth -------------------------------------------------------------------------------------------
def worth_adding(
    step: StepTime, job: JobSpec, cost_now_ms: float, cost_next_ms: float
) -> tuple[bool, str]:
    """Whether replica ``job.dp + 1`` raises throughput (replicas per step time) at the cost it brings."""
    k = job.dp
    now = k / step.step_ms(job, cost_now_ms)
    nxt = (k + 1) / step.step_ms(resized(job, k + 1), cost_next_ms)
    gain = nxt / now - 1.0
    verdict = gain > 0
    return verdict, f"throughput {'+' if gain >= 0 else ''}{100 * gain:.1f}% with {k + 1} replicas"


def add_replica(
    state: ClusterState, placer: Placer, job: JobSpec, groups: Groups, model: CostModel
) -> Groups | None:
    """``groups`` plus one replica placed next to the others (the state is left as it was); ``None`` when
    no node has room. The job's own allocation must be in ``state`` under ``job.job_id``."""
    pp, k = job.pp, job.dp
    node = state.topology.gpu_node
    old_nodes = [node[g[0]] for g in groups]
    anchor = old_nodes[(k - 1) * pp: k * pp]
    grown = resized(job, k + 1)
    released = state.release(job.job_id)
    try:
        layout = placer.keep_and_repair(grown, model, old_nodes + anchor, [True] * (k * pp) + [False] * pp)
        if layout is None:
            return None
        taken = {g for group in groups for g in group}
        new: list[tuple[int, ...]] = []
        for p in range(pp):
            free = [g for g in state.eligible_gpus(layout[k * pp + p], job.memory_per_gpu_gb) if g not in taken]
            if len(free) < job.tp:
                return None
            picked = pick_group(state.topology, free, job.tp)
            taken.update(picked)
            new.append(picked)
        return (*groups, *new)
    finally:
        if released is not None:
            state.allocate(released)


NO_ROOM_TO_GROW = "no free room for another replica"


def rigid_line(waiting: Iterable[tuple[int, str]]) -> tuple[tuple[int, str], ...]:
    """The rigid jobs waiting for GPUs, ``(priority, name)``, in the order :func:`growth_blocker` reads them
    (highest priority first); each shell lists its own waiting jobs, this orders them once per pass."""
    return tuple(sorted(waiting, reverse=True))


def growth_blocker(line: Sequence[tuple[int, str]], priority: int) -> str:
    """The rigid job that holds back the growth of an elastic job at ``priority``: the first of ``line``
    (:func:`rigid_line`) at equal or higher priority, those GPUs being its; "" when none is."""
    return next((name for p, name in line if p >= priority), "")


@dataclass(frozen=True, slots=True)
class Growth:
    resize: Resize | None  # None: stays at its size
    held_back: str  # why it is not at max ("" when it is)


def plan_growth(  # params: the job as placed (spec, groups, range), where (state, placer), its price, who waits
    state: ClusterState,
    placer: Placer,
    job: JobSpec,
    groups: Groups,
    rng: ElasticRange,
    model: CostModel,
    step: StepTime,
    rigid_waiting: str = "",
) -> Growth:
    """Grow ``job`` (at ``job.dp`` replicas on ``groups``) toward ``rng.desired``; ``rigid_waiting`` names a
    rigid job at equal or higher priority waiting for GPUs, which holds every growth back."""
    k0 = job.dp
    if k0 >= rng.max:
        return Growth(None, "")
    if k0 >= rng.desired:
        return Growth(None, f"at the desired size {rng.desired} (spec.parallelism.data; kubectl scale raises it)")
    if rigid_waiting:
        return Growth(None, f"{rigid_waiting} waits for GPUs at equal or higher priority")
    if any(state.health[g] is not GPUHealth.HEALTHY for group in groups for g in group):
        return Growth(None, "a replica is on broken hardware: repaired or dropped before growing")
    if state.counts()["free"] < job.tp * job.pp:  # a count first: no placer call while the cluster is full
        return Growth(None, NO_ROOM_TO_GROW)
    current, cur = job, groups
    reasons: list[str] = []
    held = ""
    topo = state.topology
    while current.dp < rng.desired:
        nxt = add_replica(state, placer, current, cur, model)
        if nxt is None:
            held = NO_ROOM_TO_GROW
            break
        grown = resized(current, current.dp + 1)
        node = topo.gpu_node
        before = dp_level(state, current, cur)
        after = dp_level(state, grown, nxt)
        if after > before:
            cost_now = node_level_cost(topo, current, [node[g[0]] for g in cur], model).total_ms
            cost_next = node_level_cost(topo, grown, [node[g[0]] for g in nxt], model).total_ms
            ok, line = worth_adding(step, current, cost_now, cost_next)
            crossing = f"another replica's DP traffic would cross the {topo.levels[after].name}"
            if not ok:
                held = f"{crossing}: {line}, not worth it"
                break
            reasons.append(f"{crossing}: {line}")
        current, cur = grown, nxt
        nodes = sorted({topo.node_names[node[g[0]]] for g in nxt[-job.pp:]})
        # a count, not a name: the pods of a new replica take the lowest free id (the shell names them)
        reasons.append(f"another replica on {', '.join(nodes)}")
    if current.dp == k0:
        return Growth(None, held)
    if not held and current.dp < rng.max:
        held = f"at the desired size {rng.desired} (spec.parallelism.data; kubectl scale raises it)"
    note = f"grew from {k0} to {current.dp} replicas into free GPUs"
    return Growth(Resize(job.job_id, ResizeKind.GROW, k0, current.dp, cur, (note, *reasons)), held)


# ---- shrinking ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ElasticHolding:
    """A running elastic job as shrinking sees it."""

    job: JobSpec  # at its current size
    groups: Groups
    rng: ElasticRange
    preemptible: bool = True


def takes_growth_replicas(elastic: bool, *, whole_gangs_next: bool) -> bool:
    """Whether a waiting job that does not fit may take lower-priority jobs' growth replicas (:func:`shrink_for`).
    A rigid job always may. An elastic one may where the pass's next resort is evicting whole gangs (the core's
    pass with preemption on): growth replicas are the cheaper preemption, and refusing them would kill jobs a
    shrink would have spared. Where nothing else is preempted (the FIFO path) it is admitted at its minimum
    when that fits and waits otherwise. Both admission passes ask (``core.admit.fifo``,
    ``core.admit.admission``), in both shells."""
    return not elastic or whole_gangs_next


def offers_growth_replicas(*, running: bool, being_preempted: bool, resized_this_pass: bool, preemptible: bool) -> bool:
    """Whether a running elastic job is offered to :func:`shrink_for` in this pass: all its pods run, no
    preemption of it is under way, nothing resized it already in this pass (a growth, a shrink for another job
    or a drop is being carried out), and it may be preempted at all."""
    return running and not being_preempted and not resized_this_pass and preemptible


@dataclass(frozen=True, slots=True)
class Shrink:
    resizes: tuple[Resize, ...]
    placement: Placement  # the waiting job's, once the growth replicas are gone
    reasons: tuple[str, ...]


def growth_replicas(holdings: Sequence[ElasticHolding], priority: int) -> list[tuple[ElasticHolding, int]]:
    """Replicas above min of preemptible jobs below ``priority``, in the order they are taken: lowest
    priority first, then the highest replica first."""
    out = [
        (h, d)
        for h in holdings
        if h.preemptible and h.job.priority < priority
        for d in range(h.job.dp - 1, h.rng.min - 1, -1)
    ]
    out.sort(key=lambda hd: (hd[0].job.priority, -hd[1], hd[0].job.job_id))
    return out


def shrink_for(
    state: ClusterState,
    placer: PlacerLike,
    model: CostModel,
    waiting: JobSpec,
    holdings: Sequence[ElasticHolding],
) -> Shrink | None:
    """The fewest growth replicas whose removal lets ``waiting`` place now (taken in :func:`growth_replicas`
    order), or ``None`` when all of them would not do (then whole gangs are next). The state is left as it was."""
    # A replica on broken hardware is the failure path's, and its allocation could not be put back here.
    healthy = [h for h in holdings if all(state.health[g] is GPUHealth.HEALTHY for grp in h.groups for g in grp)]
    order = growth_replicas(healthy, waiting.priority)
    if not order:
        return None
    sizes = {h.job.job_id: h.job.dp for h in holdings}
    saved: dict[str, Allocation] = {}
    placement = None
    try:
        for h, _ in order:
            jid = h.job.job_id
            if jid not in saved:
                released = state.release(jid)
                if released is None:
                    continue
                saved[jid] = released
            else:
                state.release(jid)
            sizes[jid] -= 1
            keep = h.groups[: sizes[jid] * h.job.pp]
            state.allocate(Allocation(jid, keep, h.job.memory_per_gpu_gb))
            try:
                placement = placer.place(waiting, model)
                break
            except PlacementInfeasible:
                continue
    finally:
        for jid, allocation in saved.items():
            state.release(jid)
            state.allocate(allocation)
    if placement is None:
        return None
    resizes = []
    for h in holdings:
        jid = h.job.job_id
        if sizes[jid] < h.job.dp:
            resizes.append(
                Resize(
                    jid, ResizeKind.SHRINK, h.job.dp, sizes[jid], h.groups[: sizes[jid] * h.job.pp],
                    (f"shrank from {h.job.dp} to {sizes[jid]} replicas for {waiting.job_id} (priority"
                     f" {waiting.priority} > {h.job.priority}): growth replicas go first, the cheapest"
                     " preemption; the other replicas keep running",),
                )
            )
    return Shrink(tuple(resizes), placement, tuple(r.reasons[0] for r in resizes))


# ---- failure ------------------------------------------------------------------------------------------
def drop_broken(
    state: ClusterState, job: JobSpec, groups: Groups, rng: ElasticRange, broken_groups: Sequence[int] = ()
) -> Resize | None:
    """Drop the replicas that hold a GPU that is not healthy, or one of ``broken_groups`` (TP groups the
    shell found broken: a node that went NotReady); ``None`` when none is broken or the job would fall below
    min (the failure policy decides then)."""
    pp = job.pp
    named = {g // pp for g in broken_groups}
    broken = [
        d for d in range(job.dp)
        if d in named
        or any(state.health[g] is not GPUHealth.HEALTHY for group in groups[d * pp:(d + 1) * pp] for g in group)
    ]
    kept = job.dp - len(broken)
    if not broken or kept < rng.min:
        return None
    keep = tuple(group for d in range(job.dp) if d not in broken for group in groups[d * pp:(d + 1) * pp])
    gone = ", ".join(str(d) for d in broken)
    return Resize(
        job.job_id, ResizeKind.DROP, job.dp, kept, keep,
        (f"replica(s) {gone} lost hardware with no room to repair: dropped, {kept} of min {rng.min} replicas"
         " keep running where they are",),
    )


def trim_to_desired(job: JobSpec, groups: Groups, rng: ElasticRange) -> Resize | None:
    """``kubectl scale`` below the current size: the highest replicas go, the others keep running."""
    if job.dp <= rng.desired:
        return None
    keep = groups[: rng.desired * job.pp]
    return Resize(
        job.job_id, ResizeKind.SHRINK, job.dp, rng.desired, keep,
        (f"scaled down from {job.dp} to {rng.desired} replicas (spec.parallelism.data): the highest replicas stop",),
    )

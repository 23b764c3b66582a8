"""The numbers behind the operator's gauges, computed from a pass's view and decisions (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.admit.queueing import QueueBook, QueueSpec
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.constants import DEFAULT_QUEUE
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_time
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.slices.book import recorded, sliced_gpus
from paralleljob.k8s.plan.slices.mpsbook import mps_gpus, recorded_shares
from paralleljob.k8s.plan.slices.poolbook import pool_mig_gpus
from paralleljob.k8s.view.clusterview import ClusterView

RUNNING = frozenset({Phase.PLACING, Phase.RUNNING, Phase.RECOVERING})


@dataclass(frozen=True)
class Gauges:
    jobs: dict[str, int]  # phase -> count (every phase listed)
    gpus: dict[str, int]  # total / allocated / unhealthy / free
    cost_ms: dict[str, float]  # tp / pp / dp / total, summed over placed jobs
    queue_length: dict[str, int]
    fragmentation: float
    fairness: float
    queue_gpus: dict[str, int] = field(default_factory=dict)
    reoptimizable: int = 0  # running jobs with Reoptimizable=True: a cheaper placement is worth moving to
    levels: tuple[LevelUse, ...] = ()
    # MIG (spec.gpuSharing): GPUs that slices hold (never offered whole; counted "allocated" in ``gpus`` and
    # not free in ``fragmentation``), and the slices the operator's jobs hold, by profile
    sliced_gpus: int = 0
    mig_slices: dict[str, int] = field(default_factory=dict)
    # MPS (spec.gpuSharing.mps): GPUs that shares hold (never whole), and the shares, by percent
    mps_gpus: int = 0
    mps_shares: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LevelUse:
    """One topology level's domains (nodes, racks, spines...) by how much of them is free for new work.

    A domain is ``empty`` when every GPU of it is free for new work, ``full`` when none is, else ``partial``;
    ``fragmentation`` is the share of the free GPUs that sit in partial domains: GPUs a gang that wants
    whole domains of this level cannot use (0 when every free GPU is in an empty domain)."""

    level: str
    empty: int
    partial: int
    full: int
    fragmentation: float


def fragmentation_ratio(view: ClusterView) -> float:
    """Share of the free GPUs that sit on partly used nodes (0: every free GPU is on an empty node)."""
    if view.empty:
        return 0.0
    free = stranded = 0
    topology, state = view.topology, view.state
    full = topology.max_gpus_per_node
    if topology.top >= 1 and min(topology.node_gpu_count) == full:
        # Every node has the same GPU count: the top domain's histogram of free counts says it all.
        row = state.hist[topology.top][0]
        for slot, nodes in enumerate(row):
            usable = slot % (full + 1)
            free += usable * nodes
            if 0 < usable < full:
                stranded += usable * nodes
        return stranded / free if free else 0.0
    for n in range(view.topology.num_nodes):
        usable = view.state.usable_free(n)
        free += usable
        if 0 < usable < view.topology.node_gpu_count[n]:
            stranded += usable
    return stranded / free if free else 0.0


def level_use(view: ClusterView) -> tuple[LevelUse, ...]:
    """Every level below the top (the top is the one domain of the whole cluster), from the per-domain
    histograms the placer keeps: O(domains x GPUs per node), never a scan of the GPUs, except
    the node level of a cluster whose nodes differ in GPU count (O(nodes))."""
    if view.state is None or view.topology is None or view.empty:
        return ()  # no whole-GPU node (a cluster of MIG-only nodes): no level to use
    topology, state = view.topology, view.state
    full = topology.max_gpus_per_node
    width = full + 1
    uniform = min(topology.node_gpu_count) == full
    tops = range(topology.top)  # the top level is always the one domain of the whole cluster
    capacity = [topology.domain_gpu_counts(level) for level in tops]
    out = []
    for level in tops:
        counts = [0, 0, 0]  # empty, partial, full
        free = stranded = 0
        if level == 0 and uniform:
            for slot, nodes in enumerate(_merged(state.hist[topology.top], width)):
                counts[_kind(slot, full)] += nodes
                free += slot * nodes
                stranded += slot * nodes if 0 < slot < full else 0
        elif level == 0:
            for node, size in enumerate(topology.node_gpu_count):
                usable = state.usable_free(node)
                counts[_kind(usable, size)] += 1
                free += usable
                stranded += usable if 0 < usable < size else 0
        else:
            for dom, row in enumerate(state.hist[level]):
                usable = sum(k * n for k, n in enumerate(_merged([row], width)))
                counts[_kind(usable, capacity[level][dom])] += 1
                free += usable
                stranded += usable if 0 < usable < capacity[level][dom] else 0
        name = topology.levels[level].name
        out.append(LevelUse(name, counts[0], counts[1], counts[2], stranded / free if free else 0.0))
    return tuple(out)


def _kind(usable: int, size: int) -> int:
    return 2 if usable == 0 else 0 if usable >= size else 1


def _merged(rows: Sequence[Sequence[int]], width: int) -> list[int]:
    """Histogram rows (split by memory class) summed into one row of nodes by usable free count."""
    out = [0] * width
    for row in rows:
        for i, nodes in enumerate(row):
            out[i % width] += nodes
    return out


def queue_waits(
    jobs: Sequence[JobActions], now_s: float, quiet_oldest: Mapping[str, str] | None = None
) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """(queue, seconds waited) of every job this pass admitted, and per queue the ``queuedAt`` (epoch
    seconds) of its longest-waiting job; both from the job's own ``status.queuedAt`` (when it entered the
    queue, or its creation), so a new leader or a restarted operator reports the same waits. A timestamp, not
    an age: passes run on events, so an age set at the last pass would be stale by the time it is scraped.
    ``quiet_oldest``: per queue, the oldest ``queuedAt`` among the waiting jobs the pass left out (the waiting
    memo): they wait as much as those it looked at."""
    admitted: list[tuple[str, float]] = []
    oldest: dict[str, float] = {}
    for queue, stamp in (quiet_oldest or {}).items():
        if (queued := parse_time(stamp)) is not None:
            oldest[queue] = min(oldest.get(queue, queued), queued)
    for actions in jobs:
        request = actions.job.request
        if request is None:
            continue
        queued = parse_time(str(actions.draft.data.get("queuedAt") or actions.job.queued_at))
        if queued is None:
            continue
        if actions.placed_cost is not None:
            admitted.append((request.queue, max(0.0, now_s - queued)))
        elif actions.draft.phase in (Phase.PENDING, Phase.QUEUED):
            oldest[request.queue] = min(oldest.get(request.queue, queued), queued)
    return admitted, oldest


def room_waits(jobs: Sequence[JobActions], now_s: float) -> list[tuple[str, float]]:
    """Of every job this pass admitted into room that moves freed: how long it waited since it was queued
    (``queued``, from ``status.queuedAt`` as :func:`queue_waits`) and since its plan was made (``planned``:
    how long the moves took). The first says what moves are for, the second what they cost in time."""
    out: list[tuple[str, float]] = []
    for actions in jobs:
        made = actions.room_plan_made_s
        if made is None or actions.placed_cost is None:
            continue
        queued = parse_time(str(actions.draft.data.get("queuedAt") or actions.job.queued_at))
        if queued is not None:
            out.append(("queued", max(0.0, now_s - queued)))
        out.append(("planned", max(0.0, now_s - made)))
    return out


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1.0 when everybody gets the same."""
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def queue_book(view: ClusterView, jobs: Sequence[JobActions], queues: Mapping[str, QueueInfo]) -> QueueBook:
    """The queues' usage after this pass (jobs placed, being placed or repaired), measured against the
    cluster's GPUs and GPU memory: the dominant shares that fair share orders by."""
    topo = view.topology
    total_gpus = topo.num_gpus if topo is not None else 0
    total_memory = (
        sum(c * m for c, m in zip(topo.node_gpu_count, topo.node_gpu_memory_gb, strict=True)) if topo else 0.0
    )
    specs = [QueueSpec(q.name, q.weight if q.weight > 0 else 1.0) for q in queues.values() if q.name]
    book = QueueBook({s.name: s for s in specs}, total_gpus, total_memory)
    for actions in jobs:
        request = actions.job.request
        if request is not None and actions.draft.phase in RUNNING:
            book.add(request.queue, request.spec)
    return book


def gauges(
    view: ClusterView,
    jobs: Sequence[JobActions],
    queues: Mapping[str, QueueInfo],
    fairness: float | None = None,
    quiet: Mapping[str, int] | None = None,
    book: QueueBook | None = None,
    finished: Mapping[str, int] | None = None,
    pending: Mapping[str, int] | None = None,
) -> Gauges:
    """``fairness``: Jain's index from the queueing pass when it ran; else computed here the same way, from
    ``book`` when the pass already booked the queues' usage (``Plan.queue_book``).
    ``quiet``: queue -> Queued jobs the pass left out (``Plan.quiet_waiting``), counted as waiting;
    ``pending``: queue -> new jobs it did not decide (``Plan.skipped_pending``), Pending and waiting too."""
    quiet = quiet or {}
    pending = pending or {}
    phases = Counter(a.draft.phase.value for a in jobs)
    phases[Phase.QUEUED.value] += sum(quiet.values())
    phases[Phase.PENDING.value] += sum(pending.values())
    for phase, count in (finished or {}).items():
        phases[phase] += count  # finished jobs the pass left out (Plan.quiet_finished)
    by_phase = {p.value: phases.get(p.value, 0) for p in Phase}
    counts = view.state.counts()
    cost = {"tp": 0.0, "pp": 0.0, "dp": 0.0, "total": 0.0}
    queue_gpus: dict[str, int] = {}
    queue_length: dict[str, int] = {}
    for actions in jobs:
        request = actions.job.request
        if request is None:
            continue
        if actions.draft.phase in RUNNING:
            data = actions.draft.data.get("communicationCost") or {}
            for term, key in (("tp", "tpMs"), ("pp", "ppMs"), ("dp", "dpMs"), ("total", "totalMs")):
                value = data.get(key)
                if isinstance(value, int | float):
                    cost[term] += float(value)
            queue_gpus[request.queue] = queue_gpus.get(request.queue, 0) + request.spec.num_gpus
        elif actions.draft.phase is Phase.QUEUED:
            queue_length[request.queue] = queue_length.get(request.queue, 0) + 1
    for left_out in (quiet, pending):
        for name, count in left_out.items():
            queue_length[name] = queue_length.get(name, 0) + count
    for name in (*queues, DEFAULT_QUEUE):  # the default queue is there without an object
        queue_length.setdefault(name, 0)
    if fairness is None:
        demanding = sorted(set(queue_gpus) | {q for q, n in queue_length.items() if n})
        fairness = (book or queue_book(view, jobs, queues)).jain_index(demanding)
    reoptimizable = sum(
        1
        for a in jobs
        if a.draft.phase in RUNNING
        and any(
            c.get("type") == "Reoptimizable" and c.get("status") == "True" for c in a.draft.data.get("conditions") or []
        )
    )
    return Gauges(
        by_phase,
        counts,
        cost,
        queue_length,
        fragmentation_ratio(view),
        fairness,
        queue_gpus,
        reoptimizable,
        level_use(view),
        sum(len(indices) for indices in sliced_gpus(view).values()) + pool_mig_gpus(view),
        dict(Counter(item.grant.profile for item in recorded(view))),
        sum(len(indices) for indices in mps_gpus(view).values()),
        dict(Counter(str(slot.mps.percent) for _, slot in recorded_shares(view) if slot.mps is not None)),
    )


def queue_statuses(
    jobs: Sequence[JobActions],
    queues: Mapping[str, QueueInfo],
    view: ClusterView,
    quiet: Mapping[str, int] | None = None,
    book: QueueBook | None = None,
) -> dict[str, dict[str, float]]:
    """What each ParallelJobQueue's status shows: GPUs its placed jobs hold, how many run (admitted), how
    many wait, and its fair share: the weighted dominant share (DRF over GPUs and GPU memory). ``quiet``:
    queue -> Queued jobs the pass left out, which wait too."""
    out: dict[str, dict[str, float]] = {
        name: {"gpusInUse": 0, "running": 0, "waiting": (quiet or {}).get(name, 0)} for name in queues
    }
    for actions in jobs:
        request = actions.job.request
        if request is None or request.queue not in out:
            continue
        entry = out[request.queue]
        if actions.draft.phase in RUNNING:
            entry["gpusInUse"] += request.spec.num_gpus
            entry["running"] += 1
        elif actions.draft.phase is Phase.QUEUED:
            entry["waiting"] += 1
    book = book or queue_book(view, jobs, queues)
    for name, entry in out.items():
        entry["dominantShare"] = round(book.dominant_share(name), 4)
    return out

"""The Alibaba 2023 pods replayed with whole GPUs, MIG slices or MPS shares (issue 44's comparison).

A small event loop of its own rather than a mode of the gang engine (``engine.py``): the engine places
gangs of whole GPUs through the core placer and models steps, checkpoints and failures, none of which a
one-pod job on a fraction of one GPU has; teaching it slices would touch its allocation, metrics and every
policy for a comparison that needs none of them. So this loop reuses the trace reader
(``workload.alibaba.read_pod_shares``), the cluster sampler and the core's sharing model and packing rule
(``core.slices.sharing``, ``core.slices.mig``), and keeps the engine's queue discipline ``fifo-skip``: waiting pods in
arrival order, each started when it fits, the ones that do not fit skipped. No failures.

Modes. ``whole``: every pod holds whole GPUs (today's simulator and operator). ``mig``: a pod of one GPU with
``gpu_milli < 1000`` gets the smallest MIG profile whose compute covers it (core.slices.mig.round_up), or a whole
GPU when only the 7g profile would. ``mps``: such a pod gets an MPS share of ``ceil(milli / 10)`` percent and
as much of the GPU's memory. Whole-GPU pods stay whole in every mode. Every GPU is modelled as an 80 GB
MIG-capable one: the trace's own GPUs (T4, P100, V100, anonymised G2/G3) cannot be sliced, so this answers
"what if these pods ran on MIG-capable GPUs", not what Alibaba's cluster did. ``placement="spread"`` puts a
pod on the node with the most whole free GPUs instead of the packing rule: the scattered counterpart.

Measures, over the window from the 5th-percentile arrival to the last (arrival times divided by
``speedup``), with C the GPUs: compute allocation = time integral of the compute the running pods asked
for (``gpu_milli / 1000``, or the GPU count) / (C x window); held allocation = the same of what they hold
(whole GPUs 1, a MIG slice k/7, an MPS share its percentage); GPUs in use = the same of GPUs with any
occupant; queueing delay (start - arrival) of fractional pods and of 8-GPU pods; whole free nodes = the
time-averaged number of 8-GPU nodes with all 8 GPUs whole and free, and the share of the window with none.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.slices.mig import COMPUTE_SLICES, GPU_80GB, MEMORY_SLICES, MigShape, MigSlice, round_up
from paralleljob.core.slices.sharing import (
    GpuState,
    NodeGpus,
    Placement,
    Request,
    WholeGpus,
    apply,
    mps_share_for,
    pack,
)
from paralleljob.core.topology import Topology
from paralleljob.sim.workload.trace import TraceJob

MODES = ("whole", "mig", "mps")


def request_for(job: TraceJob, milli: int, mode: str, shape: MigShape = GPU_80GB) -> Request:
    if milli >= 1000 or mode == "whole":
        return WholeGpus(job.num_gpus)
    if mode == "mig":
        profile = round_up(shape, milli / 1000)
        return WholeGpus(1) if profile is None else profile
    if mode == "mps":
        return mps_share_for(milli, shape.memory_gb)
    raise ValueError(f"unknown sharing mode {mode!r}: one of {MODES}")


@dataclass(frozen=True, slots=True)
class SharingRun:
    mode: str
    placement: str
    gpus: int
    window_s: float
    compute_allocation: float
    held_allocation: float
    gpus_in_use: float
    small_wait_s: tuple[float, ...]  # fractional pods that started, in arrival order
    whole_node_wait_s: tuple[float, ...]  # 8-GPU pods that started
    whole_free_nodes: float
    no_whole_free_node: float
    not_started: int  # still waiting at the end, or never fitting the empty cluster
    broke_whole_node_while_used_fit: int  # placements that took a whole free node when a used one fit


def cluster_nodes(topology: Topology, shape: MigShape = GPU_80GB) -> tuple[NodeGpus, ...]:
    # one network level in the Alibaba node list: each node is its own NVLink domain
    return tuple(
        NodeGpus(name, name, tuple(GpuState(shape.memory_gb, shape) for _ in range(topology.node_gpu_count[n])))
        for n, name in enumerate(topology.node_names)
    )


def check_gpu(gpu: GpuState) -> None:
    """The counters are never over-committed (raises AssertionError)."""
    memory = [i for s in gpu.slices for i in s.memory]
    assert len(memory) == len(set(memory)) and all(0 <= i < MEMORY_SLICES for i in memory), gpu
    assert sum(s.profile.compute_slices for s in gpu.slices) <= COMPUTE_SLICES, gpu
    assert sum(s.compute_pct for s in gpu.shares) <= 100 and len(gpu.shares) <= gpu.max_clients, gpu
    assert sum(s.memory_gb for s in gpu.shares) <= gpu.memory_gb + 1e-9, gpu
    assert not (gpu.whole and (gpu.slices or gpu.shares)) and not (gpu.slices and gpu.shares), gpu


def _spread(request: Request, nodes: Sequence[NodeGpus]) -> Placement:
    for node in sorted(nodes, key=lambda n: (-n.whole_free_gpus, n.name)):
        try:
            return pack(request, [node])
        except PlacementInfeasible:
            continue
    raise PlacementInfeasible("pod", ["no node fits"])


def simulate(
    topology: Topology, pods: Sequence[tuple[TraceJob, int]], mode: str, *, placement: str = "packed",
    speedup: float = 1.0, check: bool = False,
) -> SharingRun:  # fmt: skip
    nodes = cluster_nodes(topology)
    empty = nodes
    index = {n.name: i for i, n in enumerate(nodes)}
    requests = [request_for(job, milli, mode) for job, milli in pods]
    arrive = [job.submit_s / speedup for job, _ in pods]
    # the trace's first 115 days hold 25 of its 7,064 pods: the window starts at the 5th-percentile arrival
    window = (arrive[len(arrive) // 20], arrive[-1]) if pods else (0.0, 0.0)
    finishes: list[tuple[float, int, int, Placement]] = []
    queue: list[int] = []
    small: dict[int, float] = {}
    whole_node: dict[int, float] = {}
    integral = {"compute": 0.0, "held": 0.0, "in_use": 0.0, "free_nodes": 0.0, "no_free": 0.0}
    running_compute = running_held = 0.0
    rejected = broke = 0
    now, nxt = window[0], 0

    def accumulate(until: float) -> None:
        lo, hi = max(now, window[0]), min(until, window[1])
        if hi <= lo:
            return
        span = hi - lo
        free_nodes = sum(len(n.gpus) == 8 and n.whole_free_gpus == 8 for n in nodes)
        integral["compute"] += running_compute * span
        integral["held"] += running_held * span
        integral["in_use"] += sum(g.used for n in nodes for g in n.gpus) * span
        integral["free_nodes"] += free_nodes * span
        integral["no_free"] += (free_nodes == 0) * span

    while nxt < len(pods) or finishes:
        t = min(arrive[nxt] if nxt < len(pods) else float("inf"), finishes[0][0] if finishes else float("inf"))
        accumulate(t)
        now = t
        while finishes and finishes[0][0] <= t:
            _, _, i, placed = heapq.heappop(finishes)
            nodes = apply(nodes, placed, release=True)
            running_compute -= _compute(pods[i])
            running_held -= _held(placed)
        while nxt < len(pods) and arrive[nxt] <= t:
            try:  # a pod that does not fit the empty cluster would wait forever
                pack(requests[nxt], empty)
                queue.append(nxt)
            except PlacementInfeasible:
                rejected += 1
            nxt += 1
        refused: set[Request] = set()  # the cluster only fills during a pass: what failed once fails again
        waiting = []
        for i in queue:
            if requests[i] in refused:
                waiting.append(i)
                continue
            try:
                placed = pack(requests[i], nodes) if placement == "packed" else _spread(requests[i], nodes)
            except PlacementInfeasible:
                refused.add(requests[i])
                waiting.append(i)
                continue
            target = nodes[index[placed.node]]
            if not target.used and not isinstance(requests[i], WholeGpus):
                broke += any(n.used and _fits(requests[i], n) for n in nodes)
            nodes = apply(nodes, placed)
            if check:
                for gpu in nodes[index[placed.node]].gpus:
                    check_gpu(gpu)
            job, milli = pods[i]
            if milli < 1000:
                small[i] = t - arrive[i]
            elif job.num_gpus == 8:
                whole_node[i] = t - arrive[i]
            running_compute += _compute(pods[i])
            running_held += _held(placed)
            heapq.heappush(finishes, (t + job.duration_s, i, i, placed))
        queue = waiting
    gpus = sum(len(n.gpus) for n in nodes)
    norm = gpus * max(window[1] - window[0], 1e-9)
    return SharingRun(
        mode, placement, gpus, window[1] - window[0], integral["compute"] / norm, integral["held"] / norm,
        integral["in_use"] / norm, tuple(small[i] for i in sorted(small)),
        tuple(whole_node[i] for i in sorted(whole_node)), integral["free_nodes"] / max(window[1] - window[0], 1e-9),
        integral["no_free"] / max(window[1] - window[0], 1e-9), rejected + len(queue), broke,
    )  # fmt: skip


def _compute(pod: tuple[TraceJob, int]) -> float:
    job, milli = pod
    return milli / 1000 if milli < 1000 else float(job.num_gpus)


def _held(placed: Placement) -> float:
    grant = placed.grant
    if grant is None:
        return float(len(placed.gpus))
    if isinstance(grant, MigSlice):
        return grant.profile.compute_slices / COMPUTE_SLICES
    return grant.compute_pct / 100


def _fits(request: Request, node: NodeGpus) -> bool:
    try:
        pack(request, [node])
    except PlacementInfeasible:
        return False
    return True

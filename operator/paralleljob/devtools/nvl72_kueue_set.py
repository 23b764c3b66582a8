"""What ``paralleljob bench kueue --kueue-nvl72 RACKS`` submits and how it scores a placement on GB200 NVL72
trays; no I/O, so every figure it reports can be checked in a unit test.

- the background: random jobs (TP 1-8, PP 1-2, DP 1-4) placed by the core's NVLink placer on the racks, up
  to ``fraction`` + 0.3 of the GPUs, then random ones of them finished until at most ``fraction`` are used: a
  cluster that has run a while, whose cliques have different numbers of whole free trays (placing alone
  packs whole racks and leaves the others empty, where every gang fits an empty clique and both sides tie);
- the gangs: TP4 (one tray a TP group) and TP8 (two trays a TP group) shapes, each at most 48 GPUs (12 of a
  rack's 18 trays), alternating cost models, and gangs larger than any clique's whole free trays, TP8 and
  TP4 in turn;
- the tray pods: a gang of TP x PP x DP runs one pod per tray (4 GPUs, 4 consecutive global ranks, as one
  torchrun per tray), pod index = node rank; in Megatron-LM's default rank order (``tp-dp-pp``) TP group
  ``d * pp + p`` is the ``TP / 4`` pods from index ``node_rank(d, p) * TP / 4`` on;
- the score: each TP group's GPUs are its trays' GPUs in TP-rank order, priced by the core's rank-level cost
  model on the operator's own view of the nodes: for a gang whose TP groups span trays on the *NVLink
  topology* (the clique level at NVLink bandwidth, as a job with a ComputeDomain per clique gets it), for a
  gang of one tray per TP group on the view's topology (the clique priced as the network: without a
  ComputeDomain the trays of a rack talk over InfiniBand), the same rule for both schedulers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from paralleljob.core import ClusterState, JobSpec, Topology, cost_model
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.rankorder import DEFAULT_RANK_ORDER, node_rank, slot_of
from paralleljob.core.timing.evaluate import placement_cost
from paralleljob.devtools.native_set import COST_MODELS, Gang, depart, place_random_jobs, used_per_node

TRAY_GPUS = 4
TRAYS_PER_RACK = 18
LARGEST_GANG_GPUS = 48  # 12 of a rack's 18 trays: each fits an empty clique, most a half-full one


def tray_background(racks: int, fraction: float, seed: int) -> dict[int, int]:
    """Used GPUs per tray index (rack * 18 + tray) after the churn described above; seeded."""
    rng = random.Random(seed)
    state = ClusterState(nvl72_topology(racks))
    total = racks * TRAYS_PER_RACK * TRAY_GPUS
    live = place_random_jobs(state, NVLinkPlacer(state), rng, (fraction + 0.3) * total, total)
    depart(state, live, rng, fraction * total)
    return used_per_node(state)


def free_trays(used: Mapping[int, int], racks: int) -> list[int]:
    """Whole free trays of each rack (clique): the only ones a 4-GPU tray pod fits."""
    return [
        sum(1 for t in range(r * TRAYS_PER_RACK, (r + 1) * TRAYS_PER_RACK) if not used.get(t)) for r in range(racks)
    ]


def nvl72_gangs(count: int, seed: int) -> list[Gang]:
    """``count`` gangs of TP4 or TP8, PP 1-4, DP 1-8, at most 48 GPUs, alternating cost models; seeded."""
    rng = random.Random(seed)
    gangs: list[Gang] = []
    while len(gangs) < count:
        tp, pp, dp = rng.choice([4, 8]), rng.choice([1, 2, 4]), rng.choice([1, 2, 4, 8])
        if tp * pp * dp > LARGEST_GANG_GPUS or tp * pp * dp == 4:
            continue  # a single tray is no gang
        gangs.append(Gang(f"n{len(gangs):03d}", tp, pp, dp, COST_MODELS[len(gangs) % 2]))
    return gangs


def beyond_clique(count: int, free: Sequence[int], seed: int) -> list[Gang]:
    """``count`` gangs larger than any clique's whole free trays and at most three quarters of all of them,
    TP8 and TP4 in turn: a required clique can never hold them, a preferred one lets Kueue spread them,
    ParallelJobs span cliques. None when no shape of either TP fits between those bounds."""
    low, high = max(free) * TRAY_GPUS, sum(free) * TRAY_GPUS * 3 // 4
    shapes = {
        tp: [
            (tp, pp, dp)
            for pp in (1, 2, 4)
            for dp in (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)
            if low < tp * pp * dp <= high
        ]
        for tp in (8, 4)
    }
    rng = random.Random(seed)
    picked = [rng.choice(shapes[(8, 4)[i % 2]]) for i in range(count)] if shapes[8] and shapes[4] else []
    return [Gang(f"c{i:02d}", tp, pp, dp, COST_MODELS[i % 2]) for i, (tp, pp, dp) in enumerate(picked)]


def trays_per_group(gang: Gang) -> int:
    return max(1, gang.tp // TRAY_GPUS)


def tray_pods(gang: Gang) -> int:
    return gang.pods * trays_per_group(gang)


def groups_from_ranks(gang: Gang, node_of_rank: Mapping[int, str]) -> list[list[str]] | None:
    """TP group ``d * pp + p`` -> its trays in TP-rank order, from tray pod index (its node rank) -> node, in
    Megatron-LM's default rank order; None unless every tray pod is there."""
    width = trays_per_group(gang)
    if sorted(node_of_rank) != list(range(tray_pods(gang))):
        return None
    groups = [[""] * width for _ in range(gang.pods)]
    for index, node in node_of_rank.items():
        replica, stage = slot_of(DEFAULT_RANK_ORDER, index // width, gang.pp, gang.dp)
        groups[replica * gang.pp + stage][index % width] = node
    return groups


def ranks_from_status(gang: Gang, placement: Mapping[str, Any]) -> dict[int, str]:
    """A ParallelJob's ``status.placement`` as tray pod index -> node: a tray record (``layout: trays``)
    names node ranks; a record of one pod per TP group names (replica, stage), whose node rank the default
    rank order gives."""
    pods = placement.get("pods") or []
    if placement.get("layout") == "trays":
        return {int(p["nodeRank"]): str(p["node"]) for p in pods}
    return {node_rank(DEFAULT_RANK_ORDER, int(p["replica"]), int(p["stage"]), gang.pp, gang.dp): str(p["node"])
            for p in pods}  # fmt: skip


def tray_cost(
    view_topology: Topology,
    nvlink_topology: Topology,
    node_index: Mapping[str, int],
    job: JobSpec,
    model: str,
    groups: Sequence[Sequence[str]],
) -> float:
    """total_ms of the placement whose TP group ``d * pp + p`` takes the trays ``groups[d * pp + p]``, on the
    NVLink topology when TP groups span trays, else on the view's (see the module docstring)."""
    spans = any(len(trays) > 1 for trays in groups)
    topology = nvlink_topology if spans else view_topology
    tp_groups = [[g for tray in trays for g in topology.node_gpus(node_index[tray])[:TRAY_GPUS]] for trays in groups]
    return placement_cost(topology, job, tp_groups, cost_model(model)).total_ms


def clique_fit(groups: Sequence[Sequence[str]], clique_of: Mapping[str, str]) -> dict[str, int]:
    """How the placement treats the NVLink domains: TP groups inside one clique (for TP8: 2 trays of one
    clique), TP groups on distinct whole trays (no tray in two pods of the gang), and the cliques used."""
    trays = [t for group in groups for t in group]
    shared = {t for t in trays if trays.count(t) > 1}
    return {
        "tp_groups": len(groups),
        "tp_groups_in_one_clique": sum(1 for g in groups if len({clique_of[t] for t in g}) == 1),
        "tp_groups_on_own_trays": sum(1 for g in groups if len(set(g)) == len(g) and not set(g) & shared),
        "cliques": len({clique_of[t] for t in trays}),
    }

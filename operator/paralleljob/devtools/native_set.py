"""What ``paralleljob bench native`` submits and how it scores a placement; no I/O, so the numbers it reports
can be checked in a unit test.

- the background: random small jobs placed through the core placer on the cluster's own shape until about
  half its GPUs are used, kept as used GPUs per node (the benchmark makes one pre-bound pod per node of them,
  so both schedulers see the very same half-full cluster). Placed alone the core packs racks (``packed``:
  some racks full, others empty); ``churned`` fills to ``CHURN_PEAK`` the same way and then lets random
  whole jobs of it depart until the share is back down, as on a cluster after a day of arrivals and
  departures, whose free GPUs lie in uneven pieces over every rack;
- the mixed LLM set: TP 2-8, PP 1-8, DP 1-32, half of them under the seed cost model and half under the
  Megatron one, seeded, each small enough for one rack when it is empty (the single-key constraint of the
  native scheduler must have a domain that could hold it);
- the score: the communication cost of a placement given as the node of each TP group, by the operator's own
  cost model on the operator's own view of the nodes (``node_level_cost``), and the step time from the
  simulator's step-time model (``sim/steptime.py``: compute plus the exposed communication).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from paralleljob.core import Allocation, ClusterState, JobSpec, PlacementInfeasible, Placer, Topology, cost_model
from paralleljob.core.placing.placement import PlacerLike
from paralleljob.core.timing.evaluate import node_level_cost
from paralleljob.core.timing.steptime import StepTimeModel

COST_MODELS = ("seed", "megatron")
CHURN_PEAK = 0.85  # the share a churned background is filled to before its departures


@dataclass(frozen=True, slots=True)
class Gang:
    name: str
    tp: int
    pp: int
    dp: int
    cost_model: str

    @property
    def pods(self) -> int:
        return self.pp * self.dp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def shape(self) -> str:
        return f"TP{self.tp}xPP{self.pp}xDP{self.dp}"


def background(num_nodes: int, nodes_per_rack: int, fraction: float, seed: int) -> dict[int, int]:
    """Used GPUs per node after random jobs (TP 1-8, PP 1-2, DP 1-4) filled ``fraction`` of an 8-GPU cluster."""
    state, _ = _random_fill(num_nodes, nodes_per_rack, fraction, random.Random(seed))
    return used_per_node(state)


def churned_background(
    num_nodes: int, nodes_per_rack: int, fraction: float, seed: int, peak: float = CHURN_PEAK
) -> dict[int, int]:
    """Used GPUs per node after the same random jobs filled ``peak`` of the cluster and random whole ones of
    them departed until at most ``fraction`` is used; seeded."""
    rng = random.Random(seed)
    state, live = _random_fill(num_nodes, nodes_per_rack, peak, rng)
    depart(state, live, rng, fraction * num_nodes * 8)
    return used_per_node(state)


BACKGROUNDS = {"packed": background, "churned": churned_background}


def _random_fill(
    num_nodes: int, nodes_per_rack: int, fraction: float, rng: random.Random
) -> tuple[ClusterState, list[JobSpec]]:
    state = ClusterState(Topology.uniform(num_nodes, 8, levels=[("rack", nodes_per_rack, 200.0)]))
    return state, place_random_jobs(state, Placer(state), rng, fraction * num_nodes * 8, num_nodes * 4)


def depart(state: ClusterState, live: list[JobSpec], rng: random.Random, target_gpus: float) -> list[JobSpec]:
    """Random whole jobs of ``live`` released from ``state`` (and taken out of ``live``) until they hold at
    most ``target_gpus``; the jobs that departed, in order."""
    used, gone = sum(job.num_gpus for job in live), []
    while used > target_gpus and live:
        job = live.pop(rng.randrange(len(live)))
        state.release(job.job_id)
        used -= job.num_gpus
        gone.append(job)
    return gone


def place_random_jobs(
    state: ClusterState, placer: PlacerLike, rng: random.Random, target_gpus: float, max_tries: int
) -> list[JobSpec]:
    """Random jobs (TP 1-8, PP 1-2, DP 1-4) placed on ``state`` until they hold ``target_gpus`` or
    ``max_tries`` were tried (those that do not fit are skipped); the jobs placed, in order."""
    model, placed, used, tries = cost_model("seed"), [], 0, 0
    while used < target_gpus and tries < max_tries:
        job = JobSpec(f"bg-{tries}", rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2]), rng.choice([1, 2, 4]), 10.0)
        tries += 1
        try:
            placement = placer.place(job, model)
        except PlacementInfeasible:
            continue
        state.allocate(Allocation(job.job_id, placement.groups, 10.0))
        used += job.num_gpus
        placed.append(job)
    return placed


def used_per_node(state: ClusterState) -> dict[int, int]:
    """Busy GPUs of each node that has any."""
    topology, out = state.topology, {}
    for node in range(topology.num_nodes):
        busy = sum(1 for g in topology.node_gpus(node) if state.owner[g] is not None)
        if busy:
            out[node] = busy
    return out


def llm_set(count: int, rack_gpus: int, seed: int) -> list[Gang]:
    """``count`` gangs of the mixed LLM shapes, alternating cost models, each at most one rack's GPUs."""
    rng = random.Random(seed)
    gangs: list[Gang] = []
    while len(gangs) < count:
        tp, pp, dp = rng.choice([2, 4, 8]), rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8, 16, 32])
        if tp * pp * dp > rack_gpus or pp * dp > 64:
            continue
        gangs.append(Gang(f"g{len(gangs):03d}", tp, pp, dp, COST_MODELS[len(gangs) % 2]))
    return gangs


def placement_cost(
    topology: Topology, node_index: Mapping[str, int], job: JobSpec, model: str, group_nodes: Sequence[str]
) -> float:
    """total_ms of the placement whose TP group ``d * pp + p`` sits on node ``group_nodes[d * pp + p]``."""
    return node_level_cost(topology, job, [node_index[n] for n in group_nodes], cost_model(model)).total_ms


def step_ms(job: JobSpec, comm_ms: float, model: StepTimeModel | None = None) -> float:
    return (model or StepTimeModel()).step_ms(job, comm_ms)

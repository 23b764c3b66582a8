"""A step's communication as NCCL gets it: the cost model's collectives timed by ``core.timing.collectives``.

The cost models (``core.timing.cost``) say what a training step moves (how many all-reduces of how many bytes per TP
and DP group, which sends cross each pipeline boundary) and price it at the slowest link a group crosses, the
form the placer optimises. The simulator's step time asks a different question, how long that traffic
takes, and answers it here with the calibrated collective model (docs/simulator.md, "Calibration against
published NCCL-tests runs"):

* every TP and DP group's all-reduces are timed by :func:`core.timing.collectives.allreduce_ms` on the group's
  actual layout: its GPUs per NVLink domain (the topology's ``nvlink_level``: the node on HGX, the rack on
  NVL72) and, across domains, NICs at the per-GPU bandwidth of the lowest level holding the whole group (so
  an oversubscribed spine is still the bottleneck it is). The slowest group paces the step;
* a pipeline boundary moves at NVLink's effective rate inside a domain and at a NIC's effective rate across
  (the send/recv anchors), through the cost model's own pipeline formula.

The NVLink side is the calibrated fabric, not the topology's level-0 figure: a domain of one node is an HGX
H100/H200 node, a domain of several nodes an NVL72 rack (``fabric_of``). An uneven group (more members in one
domain than another) is timed at its thinnest domain, where its ring has the fewest NICs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from paralleljob.core.job import JobSpec
from paralleljob.core.timing.collectives import GB200_NVL72, HGX_H100, NIC_EFFICIENCY, Fabric, allreduce_ms
from paralleljob.core.timing.cost import CostBreakdown, CostModel
from paralleljob.core.timing.evaluate import nodes_common_level, pipeline_ms
from paralleljob.core.topology import Topology


class StepComm:
    """The calibrated timing of placements on one topology (NVLink domains sized once)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.domain_of = topology.domain_of[topology.nvlink_level]
        nodes_in = Counter(self.domain_of)
        self._fabrics: dict[tuple[bool, int], Fabric] = {}
        self._rack = [nodes_in[d] > 1 for d in self.domain_of]

    def fabric_of(self, node: int) -> Fabric:
        """The calibrated fabric of ``node``'s NVLink domain: an NVL72 rack when that domain spans several
        nodes, else an HGX node of this node's GPUs (one NIC per GPU either way)."""
        key = (self._rack[node], self.topology.node_gpu_count[node])
        fabric = self._fabrics.get(key)
        if fabric is None:
            gpus = max(1, key[1])
            fabric = GB200_NVL72 if key[0] else replace(HGX_H100, domain_gpus=gpus, node_gpus=gpus, node_nics=gpus)
            self._fabrics[key] = fabric
        return fabric

    def allreduce_ms(self, gpus: Sequence[int], num_bytes: float) -> float:
        """One all-reduce of ``num_bytes`` over ``gpus`` where they are placed."""
        if len(gpus) <= 1:
            return 0.0
        topology, domain_of = self.topology, self.domain_of
        nodes = [topology.gpu_node[g] for g in gpus]
        per_domain = Counter(domain_of[n] for n in nodes)
        fabric = self.fabric_of(nodes[0])
        thinnest, fullest = min(per_domain.values()), max(per_domain.values())
        fabric = replace(fabric, domain_gpus=max(fabric.domain_gpus, fullest))
        if len(per_domain) > 1:
            fabric = replace(fabric, nic_gbps=topology.level_bandwidth(nodes_common_level(topology, nodes)))
        return allreduce_ms(fabric, num_bytes, len(gpus), per_domain=thinnest)[0]

    def pair_bandwidth(self, a: int, b: int) -> float:
        """GB/s one GPU sends to another at: NVLink's effective rate in one domain, a NIC's across."""
        node_a, node_b = self.topology.gpu_node[a], self.topology.gpu_node[b]
        if self.domain_of[node_a] == self.domain_of[node_b]:
            return self.fabric_of(node_a).nvlink_effective
        return NIC_EFFICIENCY * self.topology.level_bandwidth(self.topology.common_level(node_a, node_b))

    def step(self, job: JobSpec, tp_groups: Sequence[Sequence[int]], model: CostModel) -> CostBreakdown:
        """The communication of one step of ``job`` placed as ``tp_groups[d * pp + p]`` (GPU ids in TP-rank
        order, the shape of ``Placement.groups``)."""
        t, pp, dp = job.tp, job.pp, job.dp
        tp_ms = 0.0
        if t > 1:
            count, size = model.tp_allreduces(job)
            tp_ms = count * max(self.allreduce_ms(group, size) for group in tp_groups)
        pp_ms = pipeline_ms(job, tp_groups, model, self.pair_bandwidth) if pp > 1 else 0.0
        dp_ms = 0.0
        if dp > 1:
            count, size = model.dp_allreduces(job)
            columns = ([tp_groups[d * pp + p][k] for d in range(dp)] for p in range(pp) for k in range(t))
            dp_ms = count * max(self.allreduce_ms(column, size) for column in columns)
        return CostBreakdown(tp_ms, pp_ms, dp_ms, model.combine(tp_ms, pp_ms, dp_ms))


def one_domain_comm(job: JobSpec, model: CostModel, fabric: Fabric = HGX_H100) -> CostBreakdown:
    """Every group inside one NVLink domain of ``fabric`` (made large enough): the reference for a job no
    placement can hold that way (a TP group larger than any node, which only first-fit accepts)."""
    wide = replace(fabric, domain_gpus=max(fabric.domain_gpus, job.num_gpus))
    tp_ms = dp_ms = pp_ms = 0.0
    if job.tp > 1:
        count, size = model.tp_allreduces(job)
        tp_ms = count * allreduce_ms(wide, size, job.tp)[0]
    if job.dp > 1:
        count, size = model.dp_allreduces(job)
        dp_ms = count * allreduce_ms(wide, size, job.dp)[0]
    if job.pp > 1:
        pp_ms = model.pp_ms(job, [fabric.nvlink_effective] * (job.pp - 1))
    return CostBreakdown(tp_ms, pp_ms, dp_ms, model.combine(tp_ms, pp_ms, dp_ms))

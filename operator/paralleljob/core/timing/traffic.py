"""Bytes one training step moves over each topology level, for a placement under a cost model.

The cost models state their terms as times; the volume behind each term is read back from the model itself
rather than re-derived: a term's time at 1 GB/s is its bytes / 1e6 (``transfer_ms``), so

* TP: ``tp_ms(job, 1)`` is what one member of a TP group sends per step (a ring all-reduce is
  2(n-1)/n x S per member); the group sends ``tp`` times that.
* PP: ``pp_ms(job, [1])`` is what one rank pair sends across one stage boundary per step (activations and,
  for Megatron, gradients back, for every micro-batch); each boundary has ``tp`` such pairs.
* DP: ``dp_ms(job, 1)`` is what one member of a DP group sends per step; there are ``pp x tp`` DP groups of
  ``dp`` members each.

A group's traffic is charged to the lowest level that contains all its members (level 0: inside a node),
the level whose links its ring or its sends must cross. The bytes are the cost model's: the seed model
charges every DP group the whole model, so it overstates DP volume by tp x pp next to Megatron's shards.
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.job import JobSpec
from paralleljob.core.timing.cost import CostModel
from paralleljob.core.timing.evaluate import nodes_common_level
from paralleljob.core.topology import Topology

_MS_AT_1_GBPS_TO_BYTES = 1e6


def term_bytes(job: JobSpec, model: CostModel) -> tuple[float, float, float]:
    """(TP bytes per group member, PP bytes per rank pair per boundary, DP bytes per group member) per step."""
    tp = model.tp_ms(job, 1.0) * _MS_AT_1_GBPS_TO_BYTES if job.tp > 1 else 0.0
    pp = model.pp_ms(job, [1.0]) * _MS_AT_1_GBPS_TO_BYTES if job.pp > 1 else 0.0
    dp = model.dp_ms(job, 1.0) * _MS_AT_1_GBPS_TO_BYTES if job.dp > 1 else 0.0
    return tp, pp, dp


def level_bytes_per_step(
    topology: Topology, job: JobSpec, tp_groups: Sequence[Sequence[int]], model: CostModel
) -> tuple[float, ...]:
    """Bytes per step charged to each level (index as ``topology.levels``) for ``tp_groups[d * pp + p]``
    = GPU ids in TP-rank order, the placement shape the placer and :mod:`core.timing.evaluate` use."""
    t, pp, dp = job.tp, job.pp, job.dp
    node = topology.gpu_node
    out = [0.0] * len(topology.levels)
    tp_member, pp_pair, dp_member = term_bytes(job, model)
    if t > 1:
        for group in tp_groups:
            out[nodes_common_level(topology, (node[g] for g in group))] += tp_member * t
    if pp > 1:
        for d in range(dp):
            for p in range(pp - 1):
                a, b = tp_groups[d * pp + p], tp_groups[d * pp + p + 1]
                for k in range(t):
                    out[topology.common_level(node[a[k]], node[b[k]])] += pp_pair
    if dp > 1:
        for p in range(pp):
            for k in range(t):
                members = (node[tp_groups[d * pp + p][k]] for d in range(dp))
                out[nodes_common_level(topology, members)] += dp_member * dp
    return tuple(out)

"""Rank orders: how a job's (replica d, stage p, TP rank k) become the global ranks a framework sees.

The placer decides which GPUs form each TP group and which groups make up each pipeline stage and each data
parallel replica. A training framework does not read that: it derives its groups from the global rank
alone, by an order of dimensions fixed in its own code. The pods must therefore be numbered in the order the
framework uses, or its DP all-reduce runs between GPUs the placer never meant to pair.

Two orders exist in practice (named innermost dimension first, as Megatron-LM names them):

- ``tp-dp-pp``: tensor fastest, then data, pipeline outermost. Megatron-LM's default (``tp-cp-ep-dp-pp``
  without context or expert parallelism), torchtitan's device mesh (``pp`` outermost) and DeepSpeed's
  pipeline topology (``PipeDataParallelTopology``: axes ``pipe, data``). Node rank ``p·dp + d``.
- ``tp-pp-dp``: tensor fastest, then pipeline, data outermost. Megatron-LM with
  ``--use-tp-pp-dp-mapping``. Node rank ``d·pp + p``.

With one pod per TP group, a pod's node rank is its index among the job's pods, and the global rank of its
TP rank ``k`` is ``node_rank·tp + k``. The order never changes which GPUs form a TP, PP or DP group, so
the cost model and the placer do not depend on it.
"""

from __future__ import annotations

from enum import Enum


class RankOrder(Enum):
    TP_DP_PP = "tp-dp-pp"
    TP_PP_DP = "tp-pp-dp"

    @classmethod
    def parse(cls, value: str) -> RankOrder:
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(o.value for o in cls)
            raise ValueError(f"rank order must be one of {names}, got {value!r}") from None


DEFAULT_RANK_ORDER = RankOrder.TP_DP_PP
# Pods placed before rank orders existed were numbered d·pp + p: their jobs keep that order.
LEGACY_RANK_ORDER = RankOrder.TP_PP_DP


def _check(replica: int, stage: int, pp: int, dp: int) -> None:
    if not (0 <= replica < dp and 0 <= stage < pp):
        raise ValueError(f"(replica {replica}, stage {stage}) is outside PP{pp}xDP{dp}")


def node_rank(order: RankOrder, replica: int, stage: int, pp: int, dp: int) -> int:
    """The node rank (pod index, torchrun's ``--node-rank``) of replica ``replica``'s stage ``stage``."""
    _check(replica, stage, pp, dp)
    if order is RankOrder.TP_DP_PP:
        return stage * dp + replica
    return replica * pp + stage


def slot_of(order: RankOrder, rank: int, pp: int, dp: int) -> tuple[int, int]:
    """(replica, stage) of the pod with node rank ``rank``: the inverse of :func:`node_rank`."""
    if not 0 <= rank < pp * dp:
        raise ValueError(f"node rank {rank} is outside 0..{pp * dp - 1}")
    if order is RankOrder.TP_DP_PP:
        stage, replica = divmod(rank, dp)
    else:
        replica, stage = divmod(rank, pp)
    return replica, stage


def global_ranks(order: RankOrder, replica: int, stage: int, tp: int, pp: int, dp: int) -> list[int]:
    """The global ranks of a pod's TP ranks 0..tp-1, in TP-rank order."""
    first = node_rank(order, replica, stage, pp, dp) * tp
    return list(range(first, first + tp))


def coordinates(order: RankOrder, rank: int, tp: int, pp: int, dp: int) -> tuple[int, int, int]:
    """(replica, stage, tp rank) of global rank ``rank``."""
    pod, k = divmod(rank, tp)
    replica, stage = slot_of(order, pod, pp, dp)
    return replica, stage, k

"""Rank orders end to end in the operator's pure parts: the env each worker pod gets and the ranks in the
status must make a framework that numbers ranks in the job's order build exactly the placer's groups.

The frameworks' own numbering is written out here independently of ``paralleljob.core.rankorder`` (from
their sources: Megatron-LM's RankGenerator for ``tp-dp-pp`` and ``tp-pp-dp``; torchtitan's mesh is
``[pp, dp, tp]``), so a mistake in the module cannot hide in the test.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paralleljob.core.rankorder import RankOrder, coordinates, global_ranks, node_rank, slot_of
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.manifests import worker_pod
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, record_from_status
from paralleljob.k8s.plan.kinds.sizings import sizing_of
from tests.k8s.factories import paralleljob


def framework_rank(order: str, d: int, p: int, k: int, tp: int, pp: int, dp: int) -> int:
    """Global rank of (replica d, stage p, TP rank k) as the framework computes it: innermost dim first."""
    if order == "tp-dp-pp":
        return k + tp * (d + dp * p)
    return k + tp * (p + pp * d)


def framework_dp_groups(order: str, tp: int, pp: int, dp: int) -> list[list[int]]:
    return [[framework_rank(order, d, p, k, tp, pp, dp) for d in range(dp)] for p in range(pp) for k in range(tp)]


def framework_pp_groups(order: str, tp: int, pp: int, dp: int) -> list[list[int]]:
    return [[framework_rank(order, d, p, k, tp, pp, dp) for p in range(pp)] for d in range(dp) for k in range(tp)]


def placed_job(tp: int, pp: int, dp: int, order: str) -> tuple[Any, PlacementRecord]:
    body = paralleljob("llm", tp, pp, dp)
    body["spec"]["rankOrder"] = order
    job = parse_job(body)
    assert job.request is not None and job.request.rank_order.value == order
    slots = tuple(
        PodSlot(f"llm-d{d}-p{p}", d, p, f"n{d * pp + p}", tuple(range(tp))) for d in range(dp) for p in range(pp)
    )
    return job, PlacementRecord(1, "seed", tp, pp, dp, slots, job.request.rank_order)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


shapes = st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(2, 5), st.integers(2, 5))
orders = st.sampled_from(["tp-dp-pp", "tp-pp-dp"])


@given(shapes, orders)
def test_env_and_status_ranks_follow_the_order_and_form_the_placers_groups(shape: tuple[int, int, int], order: str):
    tp, pp, dp = shape
    job, record = placed_job(tp, pp, dp, order)
    pods = [worker_pod(job, job.request, record, slot, 0, sizing_of(job.request)) for slot in record.slots]
    envs = {pod["metadata"]["name"]: env_of(pod) for pod in pods}
    status = {item["name"]: item for item in record.to_status()["pods"]}
    owner: dict[int, tuple[int, int, int]] = {}  # global rank -> (replica, stage, tp rank) per the pod's env
    for name, env in envs.items():
        d, p = int(env["PJ_DP_RANK"]), int(env["PJ_PP_RANK"])
        expected_node_rank = p * dp + d if order == "tp-dp-pp" else d * pp + p
        assert env["NODE_RANK"] == env["PET_NODE_RANK"] == str(expected_node_rank)
        assert status[name]["nodeRank"] == expected_node_rank
        assert env["PJ_RANK_ORDER"] == order and env["PET_RDZV_BACKEND"] == "static"
        assert env["WORLD_SIZE"] == str(tp * pp * dp) and env["PET_NNODES"] == str(pp * dp)
        assert env["PET_NPROC_PER_NODE"] == env["PJ_NPROC_PER_NODE"] == str(tp)
        ranks = [int(env["NODE_RANK"]) * tp + k for k in range(tp)]  # what torchrun gives the local ranks
        assert status[name]["ranks"] == ranks
        for k, r in enumerate(ranks):
            assert framework_rank(order, d, p, k, tp, pp, dp) == r
            owner[r] = (d, p, k)
    assert sorted(owner) == list(range(tp * pp * dp)), "every global rank is held by exactly one pod"
    for group in framework_dp_groups(order, tp, pp, dp):
        members = [owner[r] for r in group]
        assert len({(p, k) for _, p, k in members}) == 1, f"DP group {group} spans stages"
        assert sorted(d for d, _, _ in members) == list(range(dp))
    for group in framework_pp_groups(order, tp, pp, dp):
        members = [owner[r] for r in group]
        assert len({(d, k) for d, _, k in members}) == 1, f"PP group {group} spans replicas"
        assert [p for _, p, _ in members] == list(range(pp)), "stages in pipeline order"
    # MASTER_ADDR (and torchrun's) is the pod holding global rank 0 under the order
    zero = next(name for name, env in envs.items() if env["NODE_RANK"] == "0")
    for env in envs.values():
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == f"{zero}.llm.{job.namespace}.svc"
        assert env["PET_MASTER_PORT"] == env["MASTER_PORT"]


def dp_group(order: RankOrder, stage: int, k: int, tp: int, pp: int, dp: int) -> list[int]:
    """The global ranks that all-reduce gradients together, by the core's node ranks: same stage and TP
    rank, every replica."""
    return [node_rank(order, d, stage, pp, dp) * tp + k for d in range(dp)]


def pp_group(order: RankOrder, replica: int, k: int, tp: int, pp: int, dp: int) -> list[int]:
    """The global ranks of one pipeline, by the core's node ranks: same replica and TP rank, stages in order."""
    return [node_rank(order, replica, p, pp, dp) * tp + k for p in range(pp)]


@given(shapes, orders)
def test_core_functions_agree_with_the_frameworks(shape: tuple[int, int, int], name: str) -> None:
    tp, pp, dp = shape
    order = RankOrder.parse(name)
    for d in range(dp):
        for p in range(pp):
            assert slot_of(order, node_rank(order, d, p, pp, dp), pp, dp) == (d, p)
            ranks = global_ranks(order, d, p, tp, pp, dp)
            assert ranks == [framework_rank(name, d, p, k, tp, pp, dp) for k in range(tp)]
            assert [coordinates(order, r, tp, pp, dp) for r in ranks] == [(d, p, k) for k in range(tp)]
    assert sorted(map(sorted, framework_dp_groups(name, tp, pp, dp))) == sorted(
        sorted(dp_group(order, p, k, tp, pp, dp)) for p in range(pp) for k in range(tp)
    )
    assert sorted(map(sorted, framework_pp_groups(name, tp, pp, dp))) == sorted(
        sorted(pp_group(order, d, k, tp, pp, dp)) for d in range(dp) for k in range(tp)
    )


def test_seed_example_ranks_under_each_order() -> None:
    """TP4xPP2xDP2: under tp-dp-pp the DP partners of rank 0 are ranks 0 and 4 (stage 0 of both replicas)."""
    assert dp_group(RankOrder.TP_DP_PP, 0, 0, 4, 2, 2) == [0, 4]
    assert dp_group(RankOrder.TP_PP_DP, 0, 0, 4, 2, 2) == [0, 8]
    assert pp_group(RankOrder.TP_DP_PP, 0, 0, 4, 2, 2) == [0, 8]


def test_default_order_and_bad_order() -> None:
    job = parse_job(paralleljob("llm", 4, 2, 2))
    assert job.request is not None and job.request.rank_order is RankOrder.TP_DP_PP
    bad = paralleljob("llm", 4, 2, 2)
    bad["spec"]["rankOrder"] = "dp-tp-pp"
    assert "spec.rankOrder" in parse_job(bad).invalid
    with pytest.raises(ValueError, match="rank order must be one of"):
        RankOrder.parse("pp-dp-tp")


def test_a_record_from_before_rank_orders_keeps_the_numbering_its_pods_started_with() -> None:
    _, record = placed_job(4, 2, 2, "tp-dp-pp")
    status = record.to_status()
    assert status["rankOrder"] == "tp-dp-pp"
    assert record_from_status({"placement": status}) == record
    legacy = {k: v for k, v in status.items() if k != "rankOrder"}
    old = record_from_status({"placement": legacy})
    assert old is not None and old.rank_order is RankOrder.TP_PP_DP
    # d·pp + p, exactly what NODE_RANK was before the field existed
    assert [old.node_rank(s) for s in old.slots] == [0, 1, 2, 3]

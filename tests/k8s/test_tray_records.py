"""Whole-tray pods in the placement record: a real NVLink placement of TP8xPP4xDP2 on two NVL72 racks becomes
a tray record whose TP groups are the placer's, survives the status round trip, and a view built from it
holds exactly its GPUs; one-pod-per-group records read as before, and broken tray records are refused."""

from __future__ import annotations

import pytest

from paralleljob.core import ClusterState, JobSpec, cost_model
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods
from paralleljob.core.rankorder import RankOrder
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.render.trayenv import TrayJob, tray_env, tray_pod_name
from paralleljob.k8s.edge.render.traymanifests import compute_domains, job_domains, tray_pod
from paralleljob.k8s.edge.status.records import (
    MalformedRecord,
    PlacementRecord,
    PodSlot,
    record_from_status,
    record_groups,
)
from paralleljob.k8s.edge.status.trayrecords import TraySlot, tray_groups
from paralleljob.k8s.view.clusterview import Claim, build_view
from tests.k8s.factories import node, paralleljob

ORDER = RankOrder.TP_PP_DP


def _placed() -> tuple[PlacementRecord, list[list[str]]]:
    topo = nvl72_topology(2)
    placement = NVLinkPlacer(ClusterState(topo)).place(JobSpec("llm", 8, 4, 2, 10.0), cost_model("megatron"))
    pods = tray_pods(topo, placement.groups, 8, 4, 2, ORDER)
    trays = []
    for pod in pods:
        first = topo.node_first_gpu[pod.node]
        trays.append(
            TraySlot(
                tray_pod_name("llm", pod),
                topo.node_names[pod.node],
                tuple(g - first for g in pod.gpus),
                pod.node_rank,
                pod.clique,
            )
        )
    names = [
        [f"{topo.node_names[topo.gpu_node[g]]}/{g - topo.node_first_gpu[topo.gpu_node[g]]}" for g in group]
        for group in placement.groups
    ]
    return PlacementRecord(1, "megatron", 8, 4, 2, (), ORDER, trays=tuple(trays)), names


def test_a_tray_record_keeps_the_placers_tp_groups_through_the_status() -> None:
    record, groups = _placed()
    assert len(record.trays) == 16 and record.num_gpus == 64
    # The TP groups the trays' ranks spell are the placer's own, in group order d x pp + p.
    assert sorted(map(sorted, record_groups(record))) == sorted(map(sorted, groups))
    status = record.to_status()
    assert status["layout"] == "trays" and [p["nodeRank"] for p in status["pods"]] == list(range(16))
    assert all(p["ranks"] == list(range(4 * p["nodeRank"], 4 * p["nodeRank"] + 4)) for p in status["pods"])
    assert len(status["tpGroups"]) == 8 and all(len(g) == 8 for g in status["tpGroups"])
    assert record_from_status({"placement": status}) == record


def test_a_view_holds_a_tray_records_gpus_and_explains_nothing_else() -> None:
    record, _ = _placed()
    config = TopologyConfig()
    nodes = [
        parse_node(node(f"rack-{r}-tray-{t}", 4, labels={"nvidia.com/gpu.clique": f"u.{r}"}), config)
        for r in range(2)
        for t in range(18)
    ]
    view = build_view(nodes, [], [Claim("ns/llm", "uid", record)], config)
    assert view.state is not None and not view.conflicts
    assert sum(1 for owner in view.state.owner if owner == "ns/llm") == 64
    # A tray that vanished is a ghost the record still names, not a silently dropped pod.
    gone = build_view(nodes[1:], [], [Claim("ns/llm", "uid", record)], config)
    assert ("rack-0-tray-0" in gone.ghosts) == ("rack-0-tray-0" in record.nodes)


def test_tray_records_that_cannot_be_one_torchrun_per_tray_are_refused() -> None:
    record, _ = _placed()
    status = record.to_status()
    status["pods"][3]["nodeRank"] = 0
    with pytest.raises(MalformedRecord, match="node ranks"):
        record_from_status({"placement": status})
    status = record.to_status()
    status["layout"] = "columns"
    with pytest.raises(MalformedRecord, match="layout"):
        record_from_status({"placement": status})


def test_tray_pods_carry_the_env_of_their_tray_and_the_claim_of_their_clique() -> None:

    record, _ = _placed()
    job = parse_job(paralleljob("llm", 8, 4, 2, memory=10.0))
    assert job.request is not None
    topo = nvl72_topology(2)
    placement = NVLinkPlacer(ClusterState(topo)).place(JobSpec("llm", 8, 4, 2, 10.0), cost_model("megatron"))
    core_pods = tray_pods(topo, placement.groups, 8, 4, 2, ORDER)
    names = job_domains("llm", record)
    assert [d["metadata"]["name"] for d in compute_domains(job, record)] == list(names.values())
    for tray, core in zip(sorted(record.trays, key=lambda t: t.node_rank), core_pods, strict=True):
        pod = tray_pod(job, job.request, record, tray)
        container = pod["spec"]["containers"][0]
        env = [
            e
            for e in container["env"]
            if e["name"] in {x["name"] for x in tray_env(TrayJob("llm", "ns", 8, 4, 2, ORDER), core_pods, core)}
        ]
        # The env from the record alone equals the env from the placer's tray pod.
        assert env == tray_env(TrayJob("llm", "ns", 8, 4, 2, ORDER), core_pods, core)
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert pod["spec"]["resourceClaims"][-1]["resourceClaimTemplateName"] == cd.claim_template_name(
            names[tray.clique]
        )
        assert pod["metadata"]["annotations"]["paralleljob.dev/node"] == tray.node


def test_each_tray_names_the_replicas_and_stages_its_ranks_belong_to() -> None:
    record, _ = _placed()
    # TP8 on trays of 4: every tray holds half of one TP group, so one (replica, stage) by its ranks.
    for tray in record.trays:
        assert record.groups_of(tray) == ((tray.node_rank // 2 // 4, tray.node_rank // 2 % 4),)
    # Every TP group is covered by exactly two trays, under the job's rank order (tp-pp-dp: d x pp + p).
    covered = [g for tray in record.trays for g in record.groups_of(tray)]
    assert sorted(covered) == sorted([(d, p) for d in range(2) for p in range(4)] * 2)
    # TP2 on a tray of 4 holds two whole groups; tp-dp-pp numbers them p x dp + d.
    tray = TraySlot("t", "n", (0, 1, 2, 3), 1, "c")
    assert tray_groups(tray, 2, 2, 2, RankOrder.TP_DP_PP) == ((0, 1), (1, 1))
    slot = PodSlot("p", 1, 3, "n", (0,))
    assert record.groups_of(slot) == ((1, 3),)

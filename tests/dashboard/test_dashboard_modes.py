"""The web view on the cluster modes beside plain device-plugin nodes: NVL72 trays (a whole-tray pod holds
consecutive global ranks, no replica or stage of its own) and DRA (a node's GPUs are in its ResourceSlice,
not its allocatable). The feed must read both as the operator does and agree with ``paralleljob status``."""

from __future__ import annotations

import copy
from typing import Any

from paralleljob.clitools.gpumap import DraObjects, build_map, build_map_and_view
from paralleljob.core.rankorder import RankOrder
from paralleljob.dashboard import model
from paralleljob.dashboard.detail import job_detail
from paralleljob.dashboard.feed import Feed
from paralleljob.dashboard.model import STATE_LETTERS, picture
from paralleljob.k8s.edge.config import DraConfig
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from paralleljob.k8s.edge.status.trayrecords import TraySlot
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_dra import claim, dra_node, gpu, resource_slice
from tests.k8s.test_tray_admission import _cluster as tray_cluster


def _feed(objects: dict[str, list[dict[str, Any]]]) -> Feed:
    feed = Feed(None, None)  # type: ignore[arg-type]  # the API client is only for the reflectors
    for kind, items in objects.items():
        feed._on_list(kind)([copy.deepcopy(b) for b in items], "1")
    return feed


# ---- NVL72 trays -----------------------------------------------------------------------------------------
def test_a_tray_jobs_slots_name_the_replica_and_stage_of_every_rank() -> None:
    fc = tray_cluster()
    fc.add_job(paralleljob("llm", 8, 2, 2, memory=10.0))  # TP8 on trays of 4: each TP group spans two trays
    fc.settle()
    record = record_from_status(fc.job("ns/llm")["status"])
    assert record is not None and record.trays
    shown = picture(build_map(fc.nodes.values(), fc.pods.values(), fc.jobs.values()), fc.jobs.values())
    (job,) = [j for j in shown["jobs"] if j["key"] == "ns/llm"]
    assert len(job["slots"]) == 8  # one per tray: each holds half of one TP group
    for slot in job["slots"]:
        tray = next(t for t in record.trays if t.name == slot["pod"])
        assert (slot["node"], slot["gpuIndices"], slot["ranks"]) == (tray.node, list(tray.gpu_indices), tray.ranks)
        # tp-dp-pp (the default): TP group g holds ranks 8g..8g+7 and is stage g // dp, replica g % dp
        group = slot["ranks"][0] // 8
        assert (slot["stage"], slot["replica"]) == divmod(group, 2)
        assert slot["group"] == slot["replica"] * 2 + slot["stage"]
    # every TP group shows up whole: its 8 ranks over two trays of one clique
    for group in range(4):
        ranks = sorted(r for s in job["slots"] if s["group"] == group for r in s["ranks"])
        assert len(ranks) == 8 and ranks == list(range(ranks[0], ranks[0] + 8))
    # the feed (what browsers get) packs the same, and a tray's GPUs are held by the job
    feed = _feed({"nodes": list(fc.nodes.values()), "pods": list(fc.pods.values()), "jobs": list(fc.jobs.values())})
    kept, _ = feed.build()
    assert [j for j in kept["jobs"] if j["key"] == "ns/llm"] == [job]
    assert kept["totals"] == shown["totals"] and kept["totals"]["used"] == 32


def test_a_tray_holding_several_tp_groups_is_cut_into_one_slot_each() -> None:
    # TP2 x PP2 x DP2 on trays of 4 under tp-dp-pp: tray 1 holds ranks 4..7, TP groups 2 and 3 (node ranks
    # p x dp + d): stage 1 of replicas 0 and 1
    trays = (TraySlot("t0", "a", (0, 1, 2, 3), 0, "c"), TraySlot("t1", "b", (3, 2, 1, 0), 1, "c"))
    record = PlacementRecord(1, "analytic", 2, 2, 2, (), RankOrder.TP_DP_PP, trays=trays)
    slots = model.pack_slots(record)
    assert [(s["pod"], s["replica"], s["stage"], s["gpuIndices"], s["ranks"]) for s in slots] == [
        ("t0", 0, 0, [0, 1], [0, 1]),
        ("t0", 1, 0, [2, 3], [2, 3]),
        ("t1", 0, 1, [3, 2], [4, 5]),
        ("t1", 1, 1, [1, 0], [6, 7]),
    ]


# ---- DRA -------------------------------------------------------------------------------------------------
def _dra_cluster() -> tuple[dict[str, list[dict[str, Any]]], FakeCluster]:
    """Four DRA nodes on two leaves with a placed job, a waiting one and two devices in a claim of others."""
    leaves = {f"n{i}": f"leaf-{i // 2}" for i in range(4)}
    fc = FakeCluster([node(name, leaf=leaf) for name, leaf in leaves.items()])  # the operator's decisions
    fc.add_job(paralleljob("llm", 4, 2, 2))
    fc.add_job(paralleljob("small", 2, 1, 1))
    fc.settle()
    nodes = []
    for name, leaf in leaves.items():
        body = dra_node(name)
        body["metadata"]["labels"]["network.topology.nvidia.com/leaf"] = leaf
        nodes.append(body)
    slices = [resource_slice(name, [gpu(i) for i in range(8)]) for name in leaves]
    used = {(s["node"], i) for j in fc.jobs.values() for s in j["status"]["placement"]["pods"] for i in s["gpuIndices"]}
    free = sorted((n, i) for n in leaves for i in range(8) if (n, i) not in used)
    theirs = [("gpu.nvidia.com", n, f"gpu-{i}") for n, i in free[:2]]
    objects = {
        "nodes": nodes, "pods": list(fc.pods.values()), "jobs": list(fc.jobs.values()),
        "slices": slices, "claims": [claim("theirs", theirs)],
    }
    return objects, fc


def test_the_web_view_reads_dra_nodes_as_the_operator_and_status_do() -> None:
    objects, _ = _dra_cluster()
    feed = _feed(objects)
    shown, view = feed.build()
    assert sorted(shown["nodes"]) == ["n0", "n1", "n2", "n3"]  # every node, none a ghost of a record
    assert all(row["ready"] and len(row["states"]) == 8 for row in shown["nodes"].values())
    assert shown["totals"] == {"free": 12, "used": 20, "closed": 0, "degraded": 0, "drained": 0, "unhealthy": 0,
                               "total": 32}
    # what ``paralleljob status`` shows of the same objects, GPU by GPU
    status = build_map(objects["nodes"], objects["pods"], objects["jobs"],
                       dra_objects=DraObjects(objects["slices"], objects["claims"]))
    assert {r.name: "".join(STATE_LETTERS[c.state] for c in r.gpus) for r in status.nodes} == {
        n: row["states"] for n, row in shown["nodes"].items()
    }
    # and the operator's own view of them: the same free GPUs per node
    for name, row in shown["nodes"].items():
        assert row["states"].count("f") == view.state.usable_free(view.node_index[name])


def test_a_claim_or_slice_written_later_reaches_the_rows_it_changes() -> None:
    objects, _ = _dra_cluster()
    objects["claims"] = []
    feed = _feed(objects)
    before, _ = feed.build()
    assert before["totals"]["free"] == 14
    feed._on_event("claims")("ADDED", claim("late", [("gpu.nvidia.com", "n3", "gpu-7")]))
    after, _ = feed.build()
    assert after["totals"]["free"] == 13 and after["nodes"]["n3"]["states"][7] == "u"
    assert feed.changed_rows == {"n3"}  # only the row the claim changed was packed again
    tainted = gpu(6, taints=[{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}])
    body = resource_slice("n3", [gpu(i) for i in range(8) if i != 6] + [tainted])
    body["metadata"]["resourceVersion"] = "20"
    feed._on_event("slices")("MODIFIED", body)
    tainted_view, _ = feed.build()
    assert tainted_view["nodes"]["n3"]["states"][6] == "x" and tainted_view["totals"]["unhealthy"] == 1


def test_the_lower_bound_is_never_above_the_recorded_cost() -> None:
    objects, fc = _dra_cluster()
    _, view = _feed(objects).build()
    for key in ("ns/llm", "ns/small"):
        detail = job_detail(fc.job(key), view)
        cost = detail["cost"]["totalMs"]
        bound = detail["lowerBoundMs"]
        assert bound is not None and bound <= cost, (key, bound, cost)


def test_no_bound_is_shown_on_a_topology_the_job_was_not_priced_on() -> None:
    # The nodes of the placement not in view (here: DRA nodes read without their slices, as the web view did):
    # the view holds label-less ghosts of them, on which the bound came out above the recorded cost.
    objects, fc = _dra_cluster()
    feed = Feed(None, None, DraConfig(driver=""))  # type: ignore[arg-type]
    for kind in ("nodes", "pods", "jobs"):
        feed._on_list(kind)(copy.deepcopy(objects[kind]), "1")
    _, view = feed.build()
    assert view.ghosts
    detail = job_detail(fc.job("ns/llm"), view)
    assert detail["lowerBoundMs"] is None and "is not in the cluster" in detail["lowerBoundWhy"]
    assert detail["levels"] == []


def test_a_tray_jobs_panel_prices_its_cliques_as_it_was_placed() -> None:
    fc = tray_cluster()
    fc.add_job(paralleljob("llm", 8, 2, 2, memory=10.0))
    fc.settle()
    _, view = build_map_and_view(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    detail = job_detail(fc.job("ns/llm"), view)
    assert detail["lowerBoundMs"] is not None and detail["lowerBoundMs"] <= detail["cost"]["totalMs"]
    levels = {level["level"]: level for level in detail["levels"]}
    # each TP group spans two trays of one clique: its traffic crosses the clique, over NVLink
    assert "clique" in levels and levels["clique"]["bandwidthGBps"] == view.nvlink_levels["clique"]

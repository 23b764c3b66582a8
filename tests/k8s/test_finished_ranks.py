"""Ranks that exit 0 before the rest of their job: written down in ``status.succeededPods`` at once, and from
then on never created again (their pod deleted by the pod GC), repaired (their node gone) or moved."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from paralleljob.clitools.describe import describe_job
from paralleljob.clitools.gpumap import FREE, USED, build_map_and_view
from paralleljob.dashboard.detail import job_detail
from paralleljob.k8s.edge.config import DraConfig, TopologyConfig
from paralleljob.k8s.edge.parse import nodes as node_parsing
from paralleljob.k8s.edge.parse.dra import overlay_nodes, parse_slice
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.status import StatusDraft
from tests.k8s import harness
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.migworld import MIG_NODE, mig_overlay
from tests.k8s.migworld import dra_node as mig_dra_node
from tests.k8s.test_dra import dra_node as whole_gpu_dra_node
from tests.k8s.test_dra import gpu, resource_slice
from tests.k8s.test_tray_room_moves import at, nodes_of


def cluster(n: int) -> FakeCluster:
    return FakeCluster([node(f"gpu-node-{i:03d}", leaf="leaf-00") for i in range(n)])


def running(fc: FakeCluster, tp: int, pp: int, dp: int, **spec: object) -> list[str]:
    fc.add_job(paralleljob("j", tp, pp, dp, **spec))
    fc.settle()
    assert fc.phase("ns/j") == "Running"
    return [p["metadata"]["name"] for p in fc.job_pods("ns/j")]


def finish(fc: FakeCluster, name: str) -> None:
    pod = fc.pods[("ns", name)]
    pod["status"]["phase"] = "Succeeded"


def test_a_finished_rank_is_written_down_and_not_created_again_once_its_pod_is_gone() -> None:
    fc = cluster(2)
    first, second = running(fc, 8, 2, 1)
    finish(fc, first)
    fc.step()
    record = record_from_status(fc.job("ns/j")["status"])
    assert record is not None
    incarnation = record.slot_named(first).incarnation  # type: ignore[union-attr]
    assert fc.job("ns/j")["status"]["succeededPods"] == {first: incarnation}
    del fc.pods[("ns", first)]  # the pod GC
    fc.settle()
    assert fc.phase("ns/j") == "Running"
    assert [p["metadata"]["name"] for p in fc.job_pods("ns/j")] == [second], "the finished rank ran again"
    finish(fc, second)
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Succeeded" and status["message"] == "all 2 workers succeeded"
    assert "succeededPods" not in status, "a completed job keeps no list of its pods"


def test_the_node_of_a_finished_rank_going_away_is_no_failure_of_the_job() -> None:
    fc = cluster(2)
    first, second = running(fc, 8, 2, 1)
    gone = fc.pods[("ns", first)]["spec"]["nodeName"]
    finish(fc, first)
    fc.step()
    del fc.nodes[gone]  # scaled down once its only pod had finished
    del fc.pods[("ns", first)]  # and the pod GC deletes a pod whose node is gone
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Running" and status["restarts"] == 0, status
    assert [p["metadata"]["name"] for p in fc.job_pods("ns/j")] == [second]
    finish(fc, second)
    fc.settle()
    assert fc.phase("ns/j") == "Succeeded"


def test_a_restart_of_the_whole_gang_runs_the_finished_rank_again() -> None:
    """A full restart resumes every rank from the checkpoint: the finished one too, under a new incarnation,
    so the entry of its old one no longer counts."""
    fc = cluster(3)
    first, second = running(fc, 8, 2, 1, strategy="full")
    finish(fc, first)
    fc.step()
    assert first in fc.job("ns/j")["status"]["succeededPods"]
    broken = fc.pods[("ns", second)]["spec"]["nodeName"]
    fc.nodes[broken] = node(broken, ready=False, leaf="leaf-00")
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Running" and status["restarts"] == 1, status
    assert "succeededPods" not in status
    assert sorted(p["metadata"]["name"] for p in fc.job_pods("ns/j")) == sorted([first, second])
    assert all(p["status"]["phase"] == "Running" for p in fc.job_pods("ns/j"))


def test_the_status_parse_keeps_only_counts_and_the_patch_adds_one_entry_at_a_time() -> None:
    body = paralleljob("j", 8, 2, 1)
    body["status"] = {"phase": "Running", "succeededPods": {"a": 2, "b": "x", "c": True}}
    assert parse_job(body).status.succeeded_pods == {"a": 2}
    draft = StatusDraft(body["status"], parse_job(body).phase, 1)
    draft.set(succeededPods={"a": 2, "b": 3})
    assert draft.merge_patch() == {"succeededPods": {"b": 3, "c": None}}
    draft.set(succeededPods=None)
    assert draft.merge_patch() == {"succeededPods": None}


def test_a_finished_tray_pod_whose_tray_fails_is_left_alone() -> None:
    trays = [
        node(f"r0-t{t:02d}", 4, leaf="leaf-r0", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: "uuid.0"})
        for t in range(6)
    ]
    fc = FakeCluster(trays)
    fc.add_job(paralleljob("j", 8, 1, 2, memory=10.0))  # 2 TP8 groups: 4 whole trays
    for _ in range(4):
        fc.step()
    assert fc.phase("ns/j") == "Running"
    record = record_from_status(fc.job("ns/j")["status"])
    assert record is not None and len(record.trays) == 4
    done = record.trays[0]
    finish(fc, done.name)
    fc.step()
    fc.nodes[done.node]["status"]["conditions"][0]["status"] = "False"
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Running" and status.get("restarts", 0) == 0, status
    assert record_from_status(status) == record, "nothing moved"
    for tray in record.trays[1:]:
        finish(fc, tray.name)
    fc.settle()
    assert fc.phase("ns/j") == "Succeeded"


def one_finished_and_collected() -> tuple[FakeCluster, str, str]:
    """Two ranks running; the first exits 0, is written down, and the pod GC deletes its pod."""
    fc = cluster(2)
    first, second = running(fc, 8, 2, 1)
    finish(fc, first)
    fc.step()
    del fc.pods[("ns", first)]
    fc.settle()
    return fc, first, second


def test_describe_shows_a_finished_rank_whose_pod_was_deleted() -> None:
    fc, first, second = one_finished_and_collected()
    described = describe_job(fc.job("ns/j"), fc.job_pods("ns/j"))
    assert {p.name: p.pod_phase for p in described.pods} == {first: "Succeeded (pod deleted)", second: "Running"}


def test_a_finished_slice_rank_whose_gpu_breaks_is_no_failure_and_is_not_run_again() -> None:
    """MIG slices on a DRA node: seven 1g.10gb slices fill the first GPU, the eighth rank takes the second."""
    with mig_overlay():
        fc = FakeCluster([mig_dra_node(MIG_NODE)])
        sharing = {"gpuSharing": {"migProfile": "1g.10gb"}}
        fc.add_job(paralleljob("j", 1, 1, 8, memory=0, max_restarts=0, extra_spec=sharing))
        fc.settle(4)
        assert fc.phase("ns/j") == "Running"
        slots = fc.job("ns/j")["status"]["placement"]["pods"]
        by_gpu: dict[int, list[str]] = {}
        for slot in slots:
            by_gpu.setdefault(slot["gpuIndices"][0], []).append(slot["name"])
        (alone,) = [names[0] for names in by_gpu.values() if len(names) == 1]
        finish(fc, alone)
        fc.step()
        assert alone in fc.job("ns/j")["status"]["succeededPods"]
        gpu = next(g for g, names in by_gpu.items() if names == [alone])
        broken = mig_dra_node(MIG_NODE, unhealthy=str(gpu))
        fc.nodes[MIG_NODE] = broken
        del fc.pods[("ns", alone)]
        fc.settle()
        status = fc.job("ns/j")["status"]
        assert status["phase"] == "Running" and status.get("restarts", 0) == 0, status
        assert alone not in {p["metadata"]["name"] for p in fc.job_pods("ns/j")}, "the finished rank ran again"
        for pod in fc.job_pods("ns/j"):
            finish(fc, pod["metadata"]["name"])
        fc.settle()
        assert fc.phase("ns/j") == "Succeeded"


@contextmanager
def whole_gpu_pools(nodes: list[str], tainted: dict[str, set[int]]) -> Iterator[None]:
    """The harness parsing ``nodes`` as DRA nodes with eight whole GPUs each; ``tainted`` (node -> minors, a
    dict the test may change) are published with the NoExecute taint the health agent puts on a broken GPU."""

    def parse(body: dict[str, Any], config: TopologyConfig) -> NodeInfo:
        info = node_parsing.parse_node(body, config)
        name = info.name
        devices = [
            gpu(i, taints=[{"key": "paralleljob.dev/xid", "value": "79", "effect": "NoExecute"}])
            if i in tainted.get(name, set())
            else gpu(i)
            for i in range(8)
        ]
        return overlay_nodes([info], [parse_slice(resource_slice(name, devices))], [], DraConfig(), 80.0)[0]

    with mock.patch.object(harness, "parse_node", parse):
        yield


def test_a_finished_rank_on_a_dra_node_is_not_created_again_and_its_broken_gpu_is_no_failure() -> None:
    names = ["dra-0", "dra-1"]
    tainted: dict[str, set[int]] = {}
    with whole_gpu_pools(names, tainted):
        fc = FakeCluster([whole_gpu_dra_node(n) for n in names])
        first, second = running(fc, 8, 2, 1, max_restarts=0)
        gone = fc.pods[("ns", first)]["spec"]["nodeName"]
        finish(fc, first)
        fc.step()
        assert first in fc.job("ns/j")["status"]["succeededPods"]
        tainted[gone] = {0, 3}
        fc.nodes[gone] = copy.deepcopy(fc.nodes[gone])  # a new version: the node's pool changed
        del fc.pods[("ns", first)]
        fc.settle()
        status = fc.job("ns/j")["status"]
        assert status["phase"] == "Running" and status.get("restarts", 0) == 0, status
        assert [p["metadata"]["name"] for p in fc.job_pods("ns/j")] == [second]
        finish(fc, second)
        fc.settle()
        assert fc.phase("ns/j") == "Succeeded"


def test_an_elastic_job_with_a_finished_rank_is_neither_grown_nor_shrunk() -> None:
    """Growing or shrinking re-creates pods, and a finished rank's would run its training again: a job some of
    whose ranks finished is ending, so a higher-priority job waits for its GPUs instead of taking a replica."""
    fc = FakeCluster([node(f"n{i}", leaf="leaf-0") for i in range(4)])
    fc.add_job(paralleljob("filler", 8, 1, 1, memory=0.0))
    fc.settle(2)
    elastic = paralleljob("el", 8, 1, 4, memory=0.0)
    elastic["spec"]["parallelism"].update(minData=2, maxData=4)
    fc.add_job(elastic)
    fc.settle(3)
    assert fc.job("ns/el")["status"]["replicas"] == 3
    pods = sorted(p["metadata"]["name"] for p in fc.job_pods("ns/el"))
    finish(fc, pods[0])
    fc.step()
    assert pods[0] in fc.job("ns/el")["status"]["succeededPods"]
    del fc.jobs["ns/filler"]  # room frees: no growth for an ending job
    fc.settle(3)
    status = fc.job("ns/el")["status"]
    assert status["replicas"] == 3 and not any(r == "Grew" for k, r, _ in fc.events if k == "ns/el"), status
    fc.add_job(paralleljob("urgent", 8, 1, 2, memory=0.0, priority=10))  # needs a replica of the elastic job
    fc.settle(3)
    assert fc.phase("ns/urgent") != "Running"
    status = fc.job("ns/el")["status"]
    assert status["phase"] == "Running" and status["replicas"] == 3
    assert "lastResize" not in status.get("elastic", {})
    assert sorted(p["metadata"]["name"] for p in fc.job_pods("ns/el")) == pods
    for name in pods[1:]:
        finish(fc, name)
    fc.settle()
    assert fc.phase("ns/el") == "Succeeded"
    fc.settle()
    assert fc.phase("ns/urgent") == "Running"


def test_the_web_view_and_the_gpu_map_keep_a_finished_ranks_gpus_with_its_job_until_it_completes() -> None:
    """Every surface reads the one view: the finished rank's GPUs stay its job's (a full restart would run it
    there again) and its line in the web view's panel says what ``describe`` says."""
    fc, first, second = one_finished_and_collected()
    gpu_map, view = build_map_and_view(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    assert gpu_map.totals[USED] == 16 and gpu_map.totals[FREE] == 0, gpu_map.totals
    panel = job_detail(fc.job("ns/j"), view, fc.job_pods("ns/j"))
    assert {p["name"]: p["pod_phase"] for p in panel["pods"]} == {first: "Succeeded (pod deleted)", second: "Running"}
    finish(fc, second)
    fc.settle()
    gpu_map, _ = build_map_and_view(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    assert gpu_map.totals[USED] == 0 and gpu_map.totals[FREE] == 16, gpu_map.totals


def test_a_job_some_of_whose_ranks_finished_is_not_moved_to_make_room() -> None:
    """The HGX room-move scene (``test_hgx_room_moves``) with two-rank small jobs: moving one re-creates its
    pods, so once a rank of each has finished none is moved, and the big job waits saying why."""
    leaves = {"n0": "leaf-0", "n1": "leaf-0", "n2": "leaf-1", "n3": "leaf-1"}
    fc = FakeCluster([node(name, 8, leaf=leaf) for name, leaf in leaves.items()])
    small = []
    for i, name in enumerate(leaves):
        for other in leaves:  # the others' GPUs taken while it is placed, so each lands on its own node
            if other != name:
                fc.pods[("other", f"f-{other}")] = foreign_pod(f"f-{other}", other, 8)
        spec = {"checkpoint": {"intervalSeconds": 3600}}
        fc.add_job(paralleljob(f"s{i}", 1, 1, 2, memory=10.0, created=at(i), extra_spec=spec))
        for _ in range(3):
            fc.step(at(i))
        for other in leaves:
            fc.pods.pop(("other", f"f-{other}"), None)
        small.append(f"ns/s{i}")
    assert [nodes_of(fc, k) for k in small] == [{n} for n in leaves], [fc.job(k)["status"] for k in small]
    for key in small:
        finish(fc, fc.job_pods(key)[0]["metadata"]["name"])
    fc.step(at(600))
    fc.add_job(paralleljob("big", 8, 1, 2, memory=10.0, created=at(600)))
    for t in range(1, 8):
        fc.step(at(600 + t))
    assert fc.phase("ns/big") != "Running"
    for key in small:
        status = fc.job(key)["status"]
        assert status["phase"] == "Running" and "lastRoomMove" not in status and nodes_of(fc, key), status
    assert not any(reason == "MovePlanned" for _, reason, _ in fc.events)
    answer = fc.job("ns/big")["status"]["moveCheck"]["answer"]
    assert "ns/s0 cannot be moved: some of its ranks have finished: it is ending" in answer, answer

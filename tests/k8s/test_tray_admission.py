"""The operator places jobs over the trays of NVLink cliques (plan/admission/trayadmission): a TP group larger than
every node goes on whole trays of one clique, one pod per tray with its clique's ComputeDomain claim; jobs the
core placer places stay as they were; a job no clique holds waits with a reason that names cliques."""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core.admit.queueing import QueuePolicy
from paralleljob.k8s.edge.config import TopologyConfig, topology_from_mapping
from paralleljob.k8s.edge.parse.queues import parse_queue
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def _cluster(racks: int = 2, trays: int = 6, hgx: int = 2, policy: QueuePolicy | None = None) -> FakeCluster:
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(racks)
        for t in range(trays)
    ]
    nodes += [node(f"hgx-{h}", 8, leaf="leaf-hgx") for h in range(hgx)]
    return FakeCluster(nodes, policy=policy)


def _placed(fc: FakeCluster, key: str) -> Any:
    record = record_from_status(fc.job(key)["status"])
    assert record is not None, fc.job(key)["status"]
    return record


# The operator's own strict FIFO, and the core's queueing pass (fair share, backfill) through TrayAwarePlacer.
POLICIES = pytest.mark.parametrize("policy", [None, QueuePolicy(backfill=True)], ids=["fifo", "queueing pass"])


@POLICIES
def test_a_tp8_job_larger_than_the_hgx_nodes_takes_whole_trays_of_one_clique_each(policy: QueuePolicy | None) -> None:
    fc = _cluster(policy=policy)
    fc.add_job(paralleljob("llm", 8, 2, 2, memory=10.0))  # 4 TP8 groups: the 2 HGX nodes hold 2
    plan = fc.step()
    record = _placed(fc, "ns/llm")
    assert record.trays and not record.slots and len(record.trays) == 8
    clique_of = {f"r{r}-t{t:02d}": f"uuid.{r}" for r in range(2) for t in range(6)}
    for tray in record.trays:
        assert tray.clique == clique_of[tray.node] and tray.gpu_indices == (0, 1, 2, 3)
    # every TP group (2 trays, consecutive node ranks) inside one clique
    by_rank = {t.node_rank: t for t in record.trays}
    for first in range(0, 8, 2):
        assert by_rank[first].clique == by_rank[first + 1].clique
    (actions,) = [a for a in plan.jobs if a.job.key == "ns/llm"]
    domains = {
        d["metadata"]["name"]: d["metadata"]["annotations"][cd.CLIQUE_ANNOTATION] for d in actions.compute_domains
    }
    assert set(domains.values()) == {t.clique for t in record.trays}
    pods = fc.job_pods("ns/llm")
    assert len(pods) == 8 and all(p["spec"]["nodeName"] for p in pods)
    for pod in pods:
        tray = next(t for t in record.trays if t.name == pod["metadata"]["name"])
        assert pod["spec"]["nodeName"] == tray.node
        (claim,) = pod["spec"]["resourceClaims"]
        domain = next(name for name, clique in domains.items() if clique == tray.clique)
        assert claim["resourceClaimTemplateName"] == cd.claim_template_name(domain)
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    fc.step()
    assert fc.phase("ns/llm") == "Running"
    binds = len(fc.binds)
    fc.settle()
    assert len(fc.binds) == binds and len(fc.job_pods("ns/llm")) == 8, "an idle pass changes nothing"


@POLICIES
def test_a_job_an_hgx_node_holds_goes_there_as_before(policy: QueuePolicy | None) -> None:
    fc = _cluster(policy=policy)
    fc.add_job(paralleljob("small", 4, 1, 4, memory=10.0))
    fc.step()
    record = _placed(fc, "ns/small")
    assert not record.trays and len(record.slots) == 4
    assert {s.node for s in record.slots} == {"hgx-0", "hgx-1"}


@POLICIES
def test_a_tp8_job_no_clique_holds_waits_naming_the_cliques(policy: QueuePolicy | None) -> None:
    fc = _cluster(trays=3, policy=policy)
    fc.add_job(paralleljob("big", 8, 1, 2, memory=10.0))  # fills both HGX nodes
    fc.add_job(paralleljob("wide", 8, 1, 3, memory=10.0))  # 3 TP8 groups: 6 trays, each clique holds 1 group
    fc.step()
    assert fc.phase("ns/big") == "Placing"
    status = fc.job("ns/wide")["status"]
    assert status["phase"] == "Queued", status
    placed = next(c for c in status["conditions"] if c["type"] == "Placed")
    assert "clique" in placed["message"] and "largest node" not in placed["message"], placed["message"]
    assert "whole free tray" in placed["message"], placed["message"]


def _running(fc: FakeCluster, key: str) -> Any:
    fc.step()
    fc.step()
    assert fc.phase(key) == "Running"
    return _placed(fc, key)


def test_a_gone_tray_is_replaced_by_a_free_tray_of_its_clique_and_only_its_pod_moves() -> None:
    fc = _cluster()
    fc.add_job(paralleljob("llm", 8, 2, 2, memory=10.0))
    before = _running(fc, "ns/llm")
    victim = before.trays[0]
    del fc.nodes[victim.node]
    fc.step()
    after = _placed(fc, "ns/llm")
    assert victim.node not in after.nodes
    changed = [t for t in after.trays if t not in before.trays]
    assert [t.name for t in changed] == [victim.name]  # only the gone tray's pod moves
    (moved,) = changed
    assert moved.clique == victim.clique and moved.node.startswith(victim.node[:3])  # same rack: same clique
    status = fc.job("ns/llm")["status"]
    assert "repaired inside its cliques" in next(c for c in status["conditions"] if c["type"] == "Placed")["message"]
    fc.step()
    assert fc.phase("ns/llm") == "Running"
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in fc.job_pods("ns/llm")}[victim.name] == moved.node


def test_a_tray_with_no_free_tray_left_anywhere_requeues_saying_why() -> None:
    fc = _cluster(trays=2, hgx=0)
    fc.add_job(paralleljob("llm", 8, 1, 2, memory=10.0))  # both cliques full
    before = _running(fc, "ns/llm")
    fc.nodes[before.trays[0].node]["status"]["conditions"][0]["status"] = "False"
    fc.step()
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Queued", status
    assert "no room to repair inside the NVLink cliques" in status["lastFailure"]["message"] or any(
        "no room to repair inside the NVLink cliques" in c["message"] for c in status["conditions"]
    ), status


def _with_spares(spares: int, trays: int, hgx: int = 0) -> FakeCluster:
    fc = _cluster(trays=trays, hgx=hgx)
    fc.config = TopologyConfig(nvlink_spares_per_clique=spares)
    return fc


def test_warm_spares_take_no_new_gang_but_a_repair_uses_them() -> None:
    fc = _with_spares(1, trays=3)
    fc.add_job(paralleljob("llm", 8, 1, 2, memory=10.0))  # 2 groups: 4 trays; 2 free + 1 spare per clique
    record = _running(fc, "ns/llm")
    spares = {f"r{r}-t02" for r in range(2)}  # the last whole free tray of each clique
    assert not spares & set(record.nodes), record.nodes
    fc.add_job(paralleljob("more", 8, 1, 1, memory=10.0))  # only the spares are free: it waits
    fc.add_job(paralleljob("one", 4, 1, 1, memory=10.0))  # a one-tray job does not take a spare either
    fc.step()
    for key in ("ns/more", "ns/one"):
        assert fc.job(key)["status"]["phase"] == "Queued", fc.job(key)["status"]
    placed = next(c for c in fc.job("ns/more")["status"]["conditions"] if c["type"] == "Placed")
    assert "warm spares" in placed["message"], placed["message"]
    victim = record.trays[0]
    del fc.nodes[victim.node]
    fc.step()
    after = _placed(fc, "ns/llm")
    (moved,) = [t for t in after.trays if t not in record.trays]
    assert moved.node in spares and moved.clique == victim.clique


def test_the_topology_file_sets_the_spares() -> None:
    assert topology_from_mapping({"nvlinkSparesPerClique": 2}).nvlink_spares_per_clique == 2
    assert topology_from_mapping({}).nvlink_spares_per_clique == 0


def test_a_failed_tray_pod_restarts_on_its_tray_until_max_restarts() -> None:
    fc = _cluster()
    fc.add_job(paralleljob("llm", 8, 2, 2, memory=10.0))
    record = _running(fc, "ns/llm")
    victim = record.trays[1]
    for restart in range(1, 4):
        pod = next(p for p in fc.job_pods("ns/llm") if p["metadata"]["name"] == victim.name)
        pod["status"]["phase"] = "Failed"
        fc.step()
        status = fc.job("ns/llm")["status"]
        assert status["restarts"] == restart and status["lastFailure"]["pods"] == [victim.name], status
        again = _placed(fc, "ns/llm")
        assert [t.node for t in again.trays] == [t.node for t in record.trays]  # same trays
        changed = [t.name for t in again.trays if t.incarnation == again.epoch]
        assert changed == [victim.name]  # minimal: only the failed pod restarts
        fc.step()  # the failed pod is deleted, then its replacement created and bound
        fc.step()
        assert fc.phase("ns/llm") == "Running"
        assert len(fc.job_pods("ns/llm")) == 8
    pod = next(p for p in fc.job_pods("ns/llm") if p["metadata"]["name"] == victim.name)
    pod["status"]["phase"] = "Failed"
    fc.step()
    assert fc.phase("ns/llm") == "Failed"  # maxRestarts 3 reached


@POLICIES
def test_a_queue_may_set_its_own_spares(policy: QueuePolicy | None) -> None:
    fc = _cluster(racks=1, trays=4, hgx=0, policy=policy)
    fc.config = TopologyConfig(nvlink_spares_per_clique=1)
    spec = {"nvlinkSparesPerClique": 0}
    fc.queues = {"preemptible": parse_queue({"metadata": {"name": "preemptible"}, "spec": spec})}
    assert fc.queues["preemptible"].nvlink_spares == 0
    fc.add_job(paralleljob("llm", 8, 1, 1, memory=10.0))
    _running(fc, "ns/llm")  # 2 trays free, the last one a spare
    fc.add_job(paralleljob("more", 8, 1, 1, memory=10.0))  # the default queue leaves the spare alone
    fc.add_job(paralleljob("filler", 8, 1, 1, memory=10.0, queue="preemptible"))
    fc.step()
    assert fc.job("ns/more")["status"]["phase"] == "Queued"
    record = _placed(fc, "ns/filler")  # its queue says 0 spares: it takes the spare too
    assert {t.node for t in record.trays} == {"r0-t02", "r0-t03"}


# A job's node filter (gpuProduct, nodeSelector, affinity) holds on a cluster with cliques too: the "HGX nodes
# first" step places only on nodes the filter admits, so a job that names GB200 or one clique is not sent to
# an HGX node because one has room.
@POLICIES
def test_a_tp8_job_that_names_gb200_takes_trays_though_an_hgx_node_is_free(policy: QueuePolicy | None) -> None:
    fc = _cluster(policy=policy)
    fc.add_job(paralleljob("llm", 8, 1, 1, memory=10.0, extra_spec={"gpuProduct": "NVIDIA-GB200"}))
    fc.step()
    record = _placed(fc, "ns/llm")
    assert len(record.trays) == 2 and not record.slots, record
    assert all(t.node.startswith("r") for t in record.trays), record.nodes
    assert len({t.clique for t in record.trays}) == 1


@POLICIES
def test_a_tp8_job_that_names_gb200_waits_for_trays_saying_why(policy: QueuePolicy | None) -> None:
    fc = _cluster(racks=1, trays=2, policy=policy)
    fc.add_job(paralleljob("first", 8, 1, 1, memory=10.0, extra_spec={"gpuProduct": "NVIDIA-GB200"}))
    fc.add_job(paralleljob("second", 8, 1, 1, memory=10.0, extra_spec={"gpuProduct": "NVIDIA-GB200"}))
    fc.step()
    assert len(_placed(fc, "ns/first").trays) == 2
    status = fc.job("ns/second")["status"]
    assert status["phase"] == "Queued" and "placement" not in status, status
    placed = next(c for c in status["conditions"] if c["type"] == "Placed")
    assert "clique" in placed["message"] and "NVIDIA-GB200" in placed["message"], placed["message"]


@POLICIES
def test_a_tp4_job_with_a_node_selector_on_one_clique_stays_in_it(policy: QueuePolicy | None) -> None:
    fc = _cluster(policy=policy)
    template = {"spec": {"nodeSelector": {cd.CLIQUE_LABEL: "uuid.1"}, "containers": [{"name": "t", "image": "x"}]}}
    fc.add_job(paralleljob("pinned", 4, 1, 2, memory=10.0, extra_spec={"template": template}))
    fc.step()
    record = _placed(fc, "ns/pinned")
    assert record.nodes and all(n.startswith("r1-") for n in record.nodes), record.nodes


@POLICIES
def test_a_tp4_job_with_affinity_on_one_clique_stays_in_it(policy: QueuePolicy | None) -> None:
    fc = _cluster(policy=policy)
    term = {"matchExpressions": [{"key": cd.CLIQUE_LABEL, "operator": "In", "values": ["uuid.0"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    template = {"spec": {"affinity": affinity, "containers": [{"name": "t", "image": "x"}]}}
    fc.add_job(paralleljob("pinned", 4, 1, 2, memory=10.0, extra_spec={"template": template}))
    fc.step()
    record = _placed(fc, "ns/pinned")
    assert record.nodes and all(n.startswith("r0-") for n in record.nodes), record.nodes


TOPOGRAPH_CLIQUE = "accelerator.topograph.run/domain"  # one of the clique level's labels (edge/config.py)


def test_a_gone_tray_keeps_its_clique_on_a_cluster_labelled_by_topograph() -> None:
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={TOPOGRAPH_CLIQUE: f"nvl-{r}"})
        for r in range(2)
        for t in range(6)
    ]
    fc = FakeCluster([*nodes, *(node(f"hgx-{h}", 8, leaf="leaf-hgx") for h in range(2))])
    fc.add_job(paralleljob("llm", 8, 2, 2, memory=10.0))
    before = _running(fc, "ns/llm")
    assert {t.clique for t in before.trays} <= {"nvl-0", "nvl-1"}, [t.clique for t in before.trays]
    victim = before.trays[0]
    del fc.nodes[victim.node]
    fc.step()
    after = _placed(fc, "ns/llm")
    changed = [t for t in after.trays if t not in before.trays]
    assert [t.name for t in changed] == [victim.name], changed  # only the gone tray's pod moves
    (moved,) = changed
    assert moved.clique == victim.clique and moved.node.startswith(victim.node[:3])

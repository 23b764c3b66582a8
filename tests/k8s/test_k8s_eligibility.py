"""Whole reconcile passes with template constraints, unknown queues and can-never-fit jobs (in-memory API)."""

from __future__ import annotations

from typing import Any

from paralleljob.core.admit.queueing import QueuePolicy
from paralleljob.k8s.edge.constants import GPU_RESOURCE
from paralleljob.k8s.edge.parse.queues import QueueInfo
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster


def nodes(n: int = 4, **kw: Any) -> list[dict[str, Any]]:
    return [node(f"gpu-node-{i:03d}", leaf=f"leaf-{i // 2:02d}", **kw) for i in range(n)]


def with_template(name: str, tp: int = 8, pp: int = 1, dp: int = 1, **pod_spec: Any) -> dict[str, Any]:
    containers = pod_spec.pop("containers", [{"name": "train", "image": "example/train:1"}])
    return paralleljob(name, tp, pp, dp, extra_spec={"template": {"spec": {"containers": containers, **pod_spec}}})


def cpu_container(cpu: str) -> list[dict[str, Any]]:
    return [{"name": "train", "image": "example/train:1", "resources": {"requests": {"cpu": cpu}}}]


def nodes_of(fc: FakeCluster, key: str) -> set[str]:
    return {p["spec"]["nodeName"] for p in fc.job_pods(key)}


def condition(fc: FakeCluster, key: str, kind: str) -> dict[str, Any]:
    return next(c for c in fc.job(key)["status"].get("conditions", []) if c["type"] == kind)


def test_a_node_selector_nobody_matches_fails_with_the_reason() -> None:
    fc = FakeCluster(nodes())
    fc.add_job(with_template("picky", nodeSelector={"pool": "nowhere"}))
    fc.settle()
    status = fc.job("ns/picky")["status"]
    assert status["phase"] == "Failed" and status["reason"] == "Unschedulable"
    assert "no node satisfies" in status["message"] and "nodeSelector {pool=nowhere}" in status["message"]
    assert not fc.job_pods("ns/picky")


def test_a_node_selector_matching_some_nodes_places_only_there() -> None:
    raw = nodes(4)
    for body in raw[2:]:
        body["metadata"]["labels"]["pool"] = "train"
    fc = FakeCluster(raw)
    fc.add_job(with_template("sel", 8, 1, 2, nodeSelector={"pool": "train"}))
    fc.settle()
    assert fc.phase("ns/sel") == "Running" and nodes_of(fc, "ns/sel") == {"gpu-node-002", "gpu-node-003"}
    fc.add_job(with_template("more", 8, 1, 1, nodeSelector={"pool": "train"}))
    fc.settle()
    placed = condition(fc, "ns/more", "Placed")
    assert fc.phase("ns/more") == "Queued" and placed["reason"] == "Unschedulable"
    assert "labels do not match nodeSelector" in placed["message"]  # waits, and says which nodes are out


def test_required_node_affinity_with_match_fields_and_expressions() -> None:
    fc = FakeCluster(nodes(4))
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-001"]}]},
                    {
                        "matchExpressions": [
                            {"key": "network.topology.nvidia.com/leaf", "operator": "In", "values": ["leaf-01"]}
                        ]
                    },
                ]
            }
        }
    }
    fc.add_job(with_template("aff", 8, 1, 3, affinity=affinity))
    fc.settle()
    assert nodes_of(fc, "ns/aff") == {"gpu-node-001", "gpu-node-002", "gpu-node-003"}


def test_a_tainted_node_is_only_for_jobs_that_tolerate_it() -> None:
    raw = nodes(2)
    raw[0]["spec"]["taints"] = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    fc = FakeCluster(raw)
    fc.add_job(with_template("plain", 8, 1, 1))
    fc.settle()
    assert nodes_of(fc, "ns/plain") == {"gpu-node-001"}
    fc.add_job(with_template("second", 8, 1, 1))
    fc.settle()
    assert fc.phase("ns/second") == "Queued"
    assert "taint dedicated=ml:NoSchedule is not tolerated" in condition(fc, "ns/second", "Placed")["message"]
    tolerant = with_template("tolerant", 8, 1, 1, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    tolerant["spec"]["priority"] = 1  # ahead of "second", which holds the line under strict FIFO
    fc.add_job(tolerant)
    fc.settle()
    assert nodes_of(fc, "ns/tolerant") == {"gpu-node-000"}
    assert fc.phase("ns/second") == "Queued"


def test_a_cpu_request_no_node_can_hold_is_refused_with_the_reason() -> None:
    fc = FakeCluster(nodes(2))
    fc.add_job(with_template("greedy", 8, 1, 1, containers=cpu_container("100000")))
    fc.settle()
    status = fc.job("ns/greedy")["status"]
    assert status["phase"] == "Failed" and status["reason"] == "Unschedulable"
    assert "one worker requests cpu=100000" in status["message"] and "cpu=96" in status["message"]


def test_cpu_already_requested_on_a_node_limits_how_many_workers_it_takes() -> None:
    fc = FakeCluster(nodes(2))  # 96 CPUs each
    busy = foreign_pod("web", "gpu-node-000", 0)
    busy["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "80"}}
    fc.pods[("other", "web")] = busy
    # 4 workers of 2 GPUs and 20 CPUs: node 0 has room for none (16 CPUs free), node 1 for all four
    fc.add_job(with_template("cpu", 2, 1, 4, containers=cpu_container("20")))
    fc.settle()
    assert fc.phase("ns/cpu") == "Running" and nodes_of(fc, "ns/cpu") == {"gpu-node-001"}
    # node 1 is now at 80 CPUs from that gang: a second identical gang does not fit until the first ends
    fc.add_job(with_template("cpu2", 2, 1, 4, containers=cpu_container("20")))
    fc.settle()
    assert fc.phase("ns/cpu2") == "Queued"


def test_workers_admitted_in_one_pass_count_against_each_other() -> None:
    fc = FakeCluster(nodes(1))
    for name in ("a", "b"):
        fc.add_job(with_template(name, 4, 1, 1, containers=cpu_container("60")))
    fc.step()  # both are accepted; admission happens in the same pass below
    fc.step()
    assert [fc.phase("ns/a"), fc.phase("ns/b")] == ["Running", "Queued"]  # 2 x 60 CPUs > 96
    assert "room for fewer workers" in condition(fc, "ns/b", "Placed")["message"]


def test_an_unknown_queue_waits_and_runs_once_the_queue_exists() -> None:
    fc = FakeCluster(nodes(2))
    fc.add_job(paralleljob("typo", 8, 1, 1, queue="reserach"))
    fc.settle()
    placed = condition(fc, "ns/typo", "Placed")
    assert fc.phase("ns/typo") == "Queued" and placed["reason"] == "QueueNotFound"
    assert "queue reserach does not exist" in placed["message"] and not fc.job_pods("ns/typo")
    fc.queues["reserach"] = QueueInfo("reserach", max_gpus=8)
    fc.settle()
    assert fc.phase("ns/typo") == "Running"


def test_an_unknown_queue_is_a_warning_event_once_and_the_status_message_says_so() -> None:
    # Issue 22: the condition was right, but no Event, and status.message still said "waits for room in queue".
    for policy in (None, QueuePolicy(backfill=True)):
        fc = FakeCluster(nodes(2), policy=policy)
        fc.add_job(paralleljob("typo", 8, 1, 1, queue="reserach"))
        fc.settle()
        fc.settle()
        warned = [m for key, reason, m in fc.events if key == "ns/typo" and reason == "QueueNotFound"]
        assert len(warned) == 1 and "create the ParallelJobQueue reserach" in warned[0]
        status = fc.job("ns/typo")["status"]
        assert status["reason"] == "QueueNotFound" and "waits for room" not in status["message"]
        assert "queue reserach does not exist" in status["message"]


def test_a_running_job_no_longer_says_it_waits_for_room() -> None:
    # Issue 21: the Accepted condition kept "waits for room in queue default" for the job's whole life.
    fc = FakeCluster(nodes(2))
    fc.add_job(paralleljob("run", 8, 1, 1))
    fc.settle()
    status = fc.job("ns/run")["status"]
    assert status["phase"] == "Running"
    assert not [c for c in status["conditions"] if "waits for room" in c["message"]]
    assert "waits for room" not in status["message"]


def test_a_job_accepted_by_an_older_operator_has_its_accepted_condition_mended() -> None:
    fc = FakeCluster(nodes(2))
    fc.add_job(paralleljob("old", 8, 1, 1))
    fc.settle()
    body = fc.jobs["ns/old"]
    for c in body["status"]["conditions"]:
        if c["type"] == "Accepted":
            c["message"] = "TP8xPP1xDP1 (8 GPUs, 40 GB each) waits for room in queue default"  # as written before
    fc.step()
    (accepted,) = [c for c in fc.job("ns/old")["status"]["conditions"] if c["type"] == "Accepted"]
    assert accepted["message"] == "TP8xPP1xDP1 (8 GPUs, 40 GB each) accepted into queue default"
    assert fc.phase("ns/old") == "Running"


def test_an_unknown_queue_waits_under_the_core_policies_too() -> None:
    fc = FakeCluster(nodes(2), policy=QueuePolicy(backfill=True))
    fc.add_job(paralleljob("typo", 8, 1, 1, queue="nope"))
    fc.add_job(paralleljob("fine", 8, 1, 1))
    fc.settle()
    assert condition(fc, "ns/typo", "Placed")["reason"] == "QueueNotFound" and fc.phase("ns/fine") == "Running"


def test_can_never_fit_fails_at_once_even_behind_a_blocked_strict_fifo_head() -> None:
    fc = FakeCluster(nodes(2))
    fc.add_job(paralleljob("running", 8, 1, 2, created="2024-01-01T00:00:00Z"))
    fc.settle()
    fc.add_job(paralleljob("head", 8, 1, 1, created="2024-01-01T00:00:01Z"))  # waits for room
    fc.add_job(paralleljob("huge", 16, 1, 1, created="2024-01-01T00:00:02Z"))  # TP16 > any node
    fc.add_job(paralleljob("wide", 8, 1, 3, created="2024-01-01T00:00:03Z"))  # 24 GPUs > 16 in the cluster
    fc.add_job(with_template("nowhere", 8, 1, 1, nodeSelector={"pool": "x"}))
    fc.settle()
    assert fc.phase("ns/head") == "Queued"
    for name, why in (("huge", "largest node has 8"), ("wide", "holds only 2"), ("nowhere", "no node satisfies")):
        status = fc.job(f"ns/{name}")["status"]
        assert status["phase"] == "Failed" and why in status["message"], (name, status.get("message"))


def test_can_never_fit_fails_at_once_behind_a_core_policy_head() -> None:
    fc = FakeCluster(nodes(2), policy=QueuePolicy())  # fair, no backfill: every job waits behind the head
    fc.add_job(paralleljob("running", 8, 1, 2, created="2024-01-01T00:00:00Z"))
    fc.settle()
    fc.add_job(paralleljob("head", 8, 1, 1, created="2024-01-01T00:00:01Z"))
    fc.add_job(paralleljob("huge", 16, 1, 1, created="2024-01-01T00:00:02Z"))
    fc.settle()
    assert fc.phase("ns/head") == "Queued" and fc.phase("ns/huge") == "Failed"


def test_a_gpu_product_no_node_has_fails_and_one_some_have_places_there() -> None:
    raw = nodes(2)
    raw[1]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-B200"
    fc = FakeCluster(raw)
    fc.add_job(paralleljob("b200", 8, 1, 1, extra_spec={"gpuProduct": "NVIDIA-B200"}))
    fc.add_job(paralleljob("mi300", 8, 1, 1, extra_spec={"gpuProduct": "AMD-MI300X"}))
    fc.add_job(paralleljob("two", 8, 1, 2, extra_spec={"gpuProduct": "NVIDIA-B200"}))  # only one such node
    fc.settle()
    assert nodes_of(fc, "ns/b200") == {"gpu-node-001"}
    assert "GPU product is not AMD-MI300X" in fc.job("ns/mi300")["status"]["message"]
    assert fc.phase("ns/two") == "Failed" and "eligible nodes hold only 1" in fc.job("ns/two")["status"]["message"]


def test_a_node_reporting_999_gpus_is_used_with_its_gfd_count() -> None:
    raw = nodes(1)
    raw[0]["status"]["allocatable"][GPU_RESOURCE] = "999"
    fc = FakeCluster(raw)
    fc.add_job(paralleljob("big", 8, 1, 2))
    fc.settle()
    status = fc.job("ns/big")["status"]
    assert status["phase"] == "Failed" and "holds only 1" in status["message"]


def test_owned_fields_are_refused_with_invalid_template() -> None:
    fc = FakeCluster(nodes(1))
    fc.add_job(with_template("pinned", 8, 1, 1, nodeName="gpu-node-000"))
    fc.add_job(with_template("always", 8, 1, 1, restartPolicy="Always"))
    gpus = [{"name": "train", "image": "x", "resources": {"limits": {GPU_RESOURCE: "abc"}}}]
    fc.add_job(with_template("gpus", 8, 1, 1, containers=gpus))
    fc.settle()
    for name, why in (("pinned", "nodeName"), ("always", "restartPolicy"), ("gpus", "'abc'")):
        status = fc.job(f"ns/{name}")["status"]
        assert status["phase"] == "Failed" and status["reason"] == "InvalidTemplate" and why in status["message"]
        assert not fc.job_pods(f"ns/{name}")
    assert ("ns/pinned", "InvalidTemplate") in {(k, r) for k, r, _ in fc.events}


def test_a_taint_on_every_node_makes_a_job_wait_not_fail() -> None:
    raw = nodes(2)
    for body in raw:
        body["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    fc = FakeCluster(raw)
    fc.add_job(paralleljob("patient", 8, 1, 1))
    fc.settle()
    placed = condition(fc, "ns/patient", "Placed")
    assert fc.phase("ns/patient") == "Queued" and "maintenance:NoSchedule is not tolerated" in placed["message"]
    for body in raw:
        body["spec"]["taints"] = []
    fc.settle()
    assert fc.phase("ns/patient") == "Running"


def test_another_scheduler_name_is_refused_not_rewritten() -> None:
    # Issue 22: schedulerName default-scheduler was replaced by ours without a word. The CRD refuses it
    # (CEL); an operator running against an older CRD fails the job with the same reason and an Event.
    fc = FakeCluster(nodes(1))
    fc.add_job(with_template("other", 8, 1, 1, schedulerName="default-scheduler"))
    fc.add_job(with_template("ours", 8, 1, 1, schedulerName="paralleljob-scheduler"))
    fc.settle()
    status = fc.job("ns/other")["status"]
    assert status["phase"] == "Failed" and status["reason"] == "InvalidTemplate"
    assert "schedulerName must be paralleljob-scheduler" in status["message"]
    assert "the operator binds every worker itself" in status["message"]
    assert ("ns/other", "InvalidTemplate") in {(k, r) for k, r, _ in fc.events}
    assert not fc.job_pods("ns/other") and fc.phase("ns/ours") == "Running"


def test_model_shapes_beyond_any_real_model_are_refused_with_the_crds_words() -> None:
    # Issue 22: hiddenDim/seqLen 2**40 and paramsBillions 1e5 were placed at a cost of 7e15 ms.
    from paralleljob.k8s.edge.parse.specs import MODEL_BOUNDS

    fc = FakeCluster(nodes(2))
    shapes = {"wide": {"hiddenDim": 2**40}, "long": {"seqLen": 2**40}, "huge": {"paramsBillions": 1e5}}
    for name, model in shapes.items():
        fc.add_job(paralleljob(name, 8, 1, 1, extra_spec={"model": model}))
    real = {"hiddenDim": 131072, "seqLen": 10_000_000, "paramsBillions": 20000}  # the bounds themselves pass
    fc.add_job(paralleljob("real", 8, 1, 1, extra_spec={"model": real}))
    fc.settle()
    for name, model in shapes.items():
        status = fc.job(f"ns/{name}")["status"]
        (field,) = model
        assert status["phase"] == "Failed" and status["reason"] == "InvalidSpec", status
        assert status["message"].endswith(MODEL_BOUNDS[field][1])
        assert (f"ns/{name}", "InvalidSpec") in {(k, r) for k, r, _ in fc.events}
    assert fc.phase("ns/real") == "Running"

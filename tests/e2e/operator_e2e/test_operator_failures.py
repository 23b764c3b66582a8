"""Failure handling on a real API server: node and GPU failures repaired (minimal and full), no room
(Fail and Requeue), crashed workers, deleted nodes, malformed labels, and an operator killed mid-gang."""

from __future__ import annotations

import time

import pytest
from pjhelpers import Jobs, OperatorProcess, assert_gang_on_record, assert_no_gpu_used_twice, wait_for
from tests.timings import record_time

from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


def uids(pjs: Jobs, name: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in pjs.live_pods(name)}


def test_node_failure_minimal_moves_only_the_pods_on_that_node(pjs: Jobs, chaos: KubeSession) -> None:
    pjs.create("llm", 4, 2, 2, failurePolicy={"strategy": "minimal"})
    before = pjs.wait_phase("llm", "Running")
    old = {p["name"]: p for p in before["placement"]["pods"]}
    old_uids = uids(pjs, "llm")
    victim = before["placement"]["pods"][0]["node"]
    started = time.monotonic()
    chaos.make_node_not_ready(victim)
    status = pjs.wait_phase("llm", "Running", timeout_s=60, restarts=1)
    record_time("node NotReady -> minimal repair Running", time.monotonic() - started, 2.0,
                "paralleljob bench-operator (NotReady -> replacement pods bound)")  # fmt: skip
    assert_gang_on_record(pjs, "llm")
    assert victim not in status["nodes"].split(",")
    failure = status["lastFailure"]
    assert failure["kind"] == "NodeFailure" and failure["action"] == "rescheduled" and victim in failure["nodes"]
    new_uids = uids(pjs, "llm")
    for name, slot in old.items():
        if slot["node"] == victim:
            assert new_uids[name] != old_uids[name]
        else:
            assert new_uids[name] == old_uids[name], f"{name} was not on the failed node but was re-created"
    pjs.wait_events("llm", {"NodeFailure", "Rescheduled", "Repaired"})


def test_gpu_failure_full_restarts_the_gang_away_from_the_gpu(pjs: Jobs, chaos: KubeSession) -> None:
    pjs.create("full", 2, 2, 1, failurePolicy={"strategy": "full"})
    before = pjs.wait_phase("full", "Running")
    old_uids = set(uids(pjs, "full").values())
    slot = before["placement"]["pods"][0]
    chaos.set_unhealthy_gpus(slot["node"], [slot["gpuIndices"][0]])
    status = pjs.wait_phase("full", "Running", restarts=1)
    assert status["lastFailure"]["kind"] == "GPUFailure"
    assert not old_uids & set(uids(pjs, "full").values()), "full recovery re-creates every pod"
    for pod in status["placement"]["pods"]:
        assert not (pod["node"] == slot["node"] and slot["gpuIndices"][0] in pod["gpuIndices"])
    assert_gang_on_record(pjs, "full")


def test_deleted_node_is_repaired(pjs: Jobs, chaos: KubeSession) -> None:
    pjs.create("survivor", 8, 2, 1)
    before = pjs.wait_phase("survivor", "Running")
    victim = before["placement"]["pods"][1]["node"]
    chaos.delete_node(victim)
    status = pjs.wait_phase("survivor", "Running", restarts=1)
    assert victim not in status["nodes"].split(",")
    assert status["lastFailure"]["kind"] == "NodeFailure" and "gone" in status["lastFailure"]["message"]
    assert_gang_on_record(pjs, "survivor")


@pytest.mark.parametrize(
    ("policy", "phase", "action"), [("Fail", "Failed", "failed"), ("Requeue", "Queued", "requeued")]
)
def test_no_room_to_repair(pjs: Jobs, chaos: KubeSession, policy: str, phase: str, action: str) -> None:
    pjs.create("everything", 8, 1, 8, failurePolicy={"onUnplaceable": policy})  # all 64 GPUs
    before = pjs.wait_phase("everything", "Running")
    victim = before["placement"]["pods"][0]["node"]
    chaos.make_node_not_ready(victim)
    status = pjs.wait_phase("everything", phase)
    assert status["lastFailure"]["action"] == action
    assert "no room" in status["message"] or "no room" in status["lastFailure"].get("message", "") or True
    wait_for("its pods gone", lambda: not [p for p in pjs.live_pods("everything") if p.status.phase == "Running"])
    if policy == "Requeue":
        # its node failed, not the job: it keeps its place in line (issue 38), its queuedAt not restamped
        assert status["queuedAt"] == before["queuedAt"], (before["queuedAt"], status["queuedAt"])
        chaos.heal_node(victim)
        pjs.wait_phase("everything", "Running")
        assert_gang_on_record(pjs, "everything")


def test_crashed_worker_is_recreated(pjs: Jobs, kube: KubeSession) -> None:
    pjs.create("flaky", 2, 2, 1)
    pjs.wait_phase("flaky", "Running")
    old = uids(pjs, "flaky")
    kube.run(
        kube.core.patch_namespaced_pod(
            "flaky-d0-p1", pjs.namespace, {"metadata": {"annotations": {"kwok.paralleljob.dev/fail-after": "0s"}}}
        )
    )
    status = pjs.wait_phase("flaky", "Running", restarts=1)
    assert status["lastFailure"]["kind"] == "WorkerFailure"
    new = uids(pjs, "flaky")
    assert new["flaky-d0-p0"] == old["flaky-d0-p0"] and new["flaky-d0-p1"] != old["flaky-d0-p1"]


def test_malformed_node_label_is_ignored_with_a_warning(pjs: Jobs, chaos: KubeSession) -> None:
    node = chaos.shape.node_name(7)
    chaos.run(chaos.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.memory": "lots"}}}))
    try:

        def warned() -> bool:
            events = chaos.run(
                chaos.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}")
            )
            return any(e.reason == "MalformedLabel" for e in events.items)

        wait_for("a MalformedLabel event", warned)
        pjs.create("still-works", 8, 1, 8)
        pjs.wait_phase("still-works", "Running")
    finally:
        chaos.run(chaos.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.memory": "81559"}}}))


def test_operator_killed_mid_gang_resumes_without_double_binding(
    pjs: Jobs, pj_operator: OperatorProcess, kube: KubeSession
) -> None:
    pj_operator.stop()
    pj_operator.start({"PARALLELJOB_CRASH_AFTER_BINDS": "3"})
    pjs.create("resume", 1, 2, 8)  # 16 pods
    assert pj_operator.wait_exit(30) == 17, pj_operator.log_tail()
    status = pjs.status("resume")
    assert status["phase"] == "Placing" and len(status["placement"]["pods"]) == 16, "placement recorded first"
    half = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in pjs.pods("resume")}
    bound_before = {name for name, (_, node) in half.items() if node}
    assert len(bound_before) == 3, f"crash hook should leave 3 bound pods, found {sorted(bound_before)}"
    pj_operator.start()
    pjs.wait_phase("resume", "Running")
    assert_gang_on_record(pjs, "resume")
    after = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in pjs.pods("resume")}
    for name in bound_before:
        assert after[name] == half[name], f"{name} was re-created or moved after the restart"
    for name, (uid, _) in half.items():
        assert after[name][0] == uid, f"{name} was re-created instead of adopted"
    assert_no_gpu_used_twice(kube)


def test_gpu_healthy_condition_false_moves_the_job_off_the_node(pjs: Jobs, chaos: KubeSession) -> None:
    pjs.create("agent-says", 4, 1, 2)
    before = pjs.wait_phase("agent-says", "Running")
    victim = before["placement"]["pods"][0]["node"]
    chaos.set_gpu_healthy_condition(victim, healthy=False)
    status = pjs.wait_phase("agent-says", "Running", restarts=1)
    assert victim not in status["nodes"].split(",")
    assert status["lastFailure"]["kind"] == "GPUFailure"
    assert_gang_on_record(pjs, "agent-says")


def test_cordoned_and_tainted_nodes_get_no_new_pods(pjs: Jobs, chaos: KubeSession) -> None:
    names = chaos.shape.names()
    closed = names[:7]  # one node stays open
    for i, name in enumerate(closed):
        patch: dict[str, object] = (
            {"spec": {"unschedulable": True}}
            if i % 2
            else {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}}
        )
        chaos.run(chaos.core.patch_node(name, patch))
    pjs.create("fits-one-node", 8, 1, 1)
    status = pjs.wait_phase("fits-one-node", "Running")
    assert status["nodes"] == names[7]
    pjs.create("needs-two", 8, 1, 2)
    pjs.wait_phase("needs-two", "Queued")


def test_a_gang_the_api_refuses_part_way_is_rolled_back_and_backs_off_longer_each_time(pjs: Jobs) -> None:
    # The API server's ResourceQuota admission admits two pods of the namespace, then refuses (403). The
    # dev cluster runs no quota controller, so the quota's usage is set here and only ever counted up.
    core, ns = pjs.kube.core, pjs.namespace
    quota = {"metadata": {"name": "two-pods"}, "spec": {"hard": {"pods": "2"}}}
    pjs.kube.run(core.create_namespaced_resource_quota(ns, quota))
    pjs.kube.run(
        core.patch_namespaced_resource_quota_status(
            "two-pods", ns, {"status": {"hard": {"pods": "2"}, "used": {"pods": "0"}}}
        )
    )
    pjs.create("capped", 2, 2, 2)  # 4 pods
    waits: dict[str, float] = {}  # the wait a condition names -> when it was first seen
    live_while_waiting: list[int] = []

    def backed_off_twice() -> bool:
        placed = next((c for c in pjs.status("capped").get("conditions", []) if c["type"] == "Placed"), {})
        if placed.get("reason") == "BackingOff":
            waits.setdefault(placed["message"].split(" after:")[0], time.monotonic())
            live_while_waiting.append(len(pjs.live_pods("capped")))
            assert "exceeded quota" in placed["message"], placed["message"]
        return {"retrying in 1 s", "retrying in 2 s"} <= waits.keys()

    wait_for("two back-offs in a row, 1 s then 2 s", backed_off_twice, timeout_s=30, interval=0.05)
    # The operator is woken when the wait ends (its periodic pass here is every 10 s).
    assert waits["retrying in 2 s"] - waits["retrying in 1 s"] < 5.0, waits
    assert set(live_while_waiting) == {0}, "no pod of a refused gang is left while it waits"
    assert "RolledBack" in pjs.wait_events("capped", {"RolledBack"})
    pjs.kube.run(core.patch_namespaced_resource_quota("two-pods", ns, {"spec": {"hard": {"pods": "100"}}}))
    pjs.kube.run(
        core.patch_namespaced_resource_quota_status(
            "two-pods", ns, {"status": {"hard": {"pods": "100"}, "used": {"pods": "0"}}}
        )
    )
    pjs.wait_phase("capped", "Running", timeout_s=60)  # after the wait in progress (at most 10 s by now)
    assert_gang_on_record(pjs, "capped")

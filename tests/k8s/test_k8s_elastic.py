"""Elastic jobs through the operator's pure pass (FakeCluster): admitted at the largest size that fits,
grown next to the others when room frees, shrunk for a higher-priority rigid job by a growth replica, a
broken replica dropped without moving the others (a drop, not a restart: maxRestarts never fails a job that
keeps minData), scaled by spec.parallelism.data."""

from __future__ import annotations

from typing import Any

from paralleljob.k8s.edge.constants import MASTER_PORT, REPLICA_GROUP_LABEL
from paralleljob.k8s.edge.parse.queues import queue_policy
from paralleljob.k8s.edge.parse.specs import parse_job
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

KEY = "ns/el"


def _elastic(desired: int = 4, lo: int = 2, hi: int = 4, priority: int = 0) -> dict[str, Any]:
    body = paralleljob("el", 8, 1, desired, memory=0.0, priority=priority)
    body["spec"]["parallelism"].update(minData=lo, maxData=hi)
    return body


def _pods(fc: FakeCluster, key: str = KEY) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in fc.job_pods(key)}


def _cluster(n: int) -> FakeCluster:
    return FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 4}") for i in range(n)])


def test_parse_gives_a_frozen_range() -> None:
    job = parse_job(_elastic(3))
    assert job.request is not None and job.request.elastic is not None
    assert (job.request.elastic.min, job.request.elastic.max, job.request.elastic.desired) == (2, 4, 3)
    bad = _elastic(3)
    bad["spec"]["parallelism"]["data"] = 5
    assert "outside the elastic range minData..maxData = 2..4" in parse_job(bad).invalid
    group = _elastic(3)
    del group["spec"]["template"]
    group["spec"]["podGroup"] = "el"
    assert "cannot be elastic" in parse_job(group).invalid


def test_starts_at_what_fits_grows_next_to_the_others_and_gives_growth_replicas_away() -> None:
    fc = _cluster(4)
    fc.add_job(paralleljob("filler", 8, 1, 1, memory=0.0))
    fc.settle(2)
    fc.add_job(_elastic())
    fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Running" and status["replicas"] == 3
    assert status["replicaRange"] == "3/4 (2..4)"
    assert "no free room" in status["elastic"]["notAtMax"]
    before = _pods(fc)
    assert len(before) == 3
    del fc.jobs["ns/filler"]  # room frees
    fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["replicas"] == 4 and status["elastic"]["notAtMax"] == ""
    after = _pods(fc)
    assert {k: v for k, v in after.items() if k in before} == before  # nobody moved
    assert any(r == "Grew" for _, r, _ in fc.events)
    # a rigid higher-priority job takes the growth replica, not the whole gang
    fc.add_job(paralleljob("urgent", 8, 1, 1, memory=0.0, priority=10))
    fc.settle(3)
    assert fc.phase("ns/urgent") == "Running"
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Running" and status["replicas"] == 3
    assert status["elastic"]["lastResize"]["kind"] == "Shrank"
    assert "cheapest" in status["elastic"]["lastResize"]["reason"]
    assert _pods(fc) == {k: v for k, v in after.items() if k in _pods(fc)}
    # growth holds back while a rigid job at >= priority waits; the elastic job keeps >= min
    fc.add_job(paralleljob("big", 8, 1, 2, memory=0.0, priority=10))
    fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["replicas"] >= 2


def test_node_failure_drops_the_replica_and_keeps_the_others() -> None:
    fc = _cluster(3)
    fc.add_job(_elastic())
    fc.settle(3)
    before = _pods(fc)
    assert len(before) == 3
    victim_pod, victim = sorted(before.items())[1]
    fc.nodes[victim] = node(victim, ready=False, leaf="leaf-0")
    fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Running" and status["replicas"] == 2
    assert status["lastFailure"]["action"] == "DroppedReplica"
    assert _pods(fc) == {k: v for k, v in before.items() if k != victim_pod}
    # below min: the failure policy applies (Requeue)
    other = sorted(_pods(fc).values())[0]
    fc.nodes[other] = node(other, ready=False, leaf="leaf-0")
    fc.settle(2)
    assert fc.phase(KEY) == "Queued"
    # grows back when room returns
    fc.nodes[victim] = node(victim, leaf="leaf-0")
    fc.nodes[other] = node(other, leaf="leaf-0")
    fc.settle(4)
    assert fc.job(KEY)["status"]["replicas"] == 3


def _lose(fc: FakeCluster, name: str) -> None:
    fc.nodes[name] = node(name, ready=False, leaf="leaf-0")


def _heal(fc: FakeCluster, name: str) -> None:
    fc.nodes[name] = node(name, leaf="leaf-0")


def test_drops_above_min_are_not_restarts_so_loss_and_heal_cycles_never_fail_the_job() -> None:
    # data 4, minData 2, the default maxRestarts 3, four nodes and nothing spare: every node loss drops a
    # replica and every heal grows it back. A drop restarts no pod, so the fourth loss (and the tenth) is
    # dropped like the first instead of failing the job at maxRestarts with three healthy replicas.
    fc = _cluster(4)
    fc.add_job(_elastic())
    fc.settle(3)
    assert fc.job(KEY)["status"]["replicas"] == 4
    for cycle in range(1, 5):
        victim = sorted(_pods(fc).values())[cycle % 4]
        _lose(fc, victim)
        fc.settle(3)
        status = fc.job(KEY)["status"]
        assert status["phase"] == "Running" and status["replicas"] == 3, (cycle, status.get("message"))
        assert status["lastFailure"]["action"] == "DroppedReplica"
        assert status.get("restarts", 0) == 0 and status["elastic"]["drops"] == cycle
        _heal(fc, victim)
        fc.settle(3)
        assert fc.job(KEY)["status"]["replicas"] == 4
    assert sum(k == KEY and r == "DroppedReplica" for k, r, _ in fc.events) == 4  # a Normal Event each


def test_a_loss_at_min_data_is_a_failure_and_counts_a_restart() -> None:
    fc = _cluster(4)
    fc.add_job(_elastic())
    fc.settle(3)
    nodes = sorted(_pods(fc).values())
    for name in nodes[:2]:  # 4 -> 3 -> 2 replicas: drops, no restart
        _lose(fc, name)
        fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["replicas"] == 2 and status.get("restarts", 0) == 0 and status["elastic"]["drops"] == 2
    _lose(fc, nodes[2])  # at minData: the failure policy (Requeue) applies and counts a restart
    fc.settle(2)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Queued" and status["restarts"] == 1 and status["elastic"]["drops"] == 2
    assert status["lastFailure"]["action"] == "requeued"


def test_a_drop_is_still_taken_at_the_restart_limit() -> None:
    # maxRestarts 0: any repair would fail the job, but a drop restarts no pod, so the limit does not forbid it
    fc = _cluster(3)
    body = _elastic()
    body["spec"]["failurePolicy"]["maxRestarts"] = 0
    fc.add_job(body)
    fc.settle(3)
    _lose(fc, sorted(_pods(fc).values())[0])
    fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Running" and status["replicas"] == 2 and status.get("restarts", 0) == 0
    # at min, the limit stands: the job fails without counting a restart that does not happen
    _lose(fc, sorted(_pods(fc).values())[0])
    fc.settle(2)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Failed" and "maxRestarts 0 reached" in status["message"]
    assert status.get("restarts", 0) == 0 and status["elastic"]["drops"] == 1


def test_scale_changes_the_desired_size() -> None:
    fc = _cluster(4)
    fc.add_job(_elastic(2))
    fc.settle(3)
    assert fc.job(KEY)["status"]["replicas"] == 2
    assert "desired size 2" in fc.job(KEY)["status"]["elastic"]["notAtMax"]
    fc.jobs[KEY]["spec"]["parallelism"]["data"] = 4
    fc.settle(2)
    assert fc.job(KEY)["status"]["replicas"] == 4
    fc.jobs[KEY]["spec"]["parallelism"]["data"] = 3
    fc.settle(2)
    status = fc.job(KEY)["status"]
    assert status["replicas"] == 3 and status["elastic"]["lastResize"]["kind"] == "ScaledDown"
    assert len(_pods(fc)) == 3


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_workers_get_torchrun_elastic_env_and_a_stable_replica_group_id() -> None:
    fc = _cluster(3)
    memberships: list[dict[str, Any]] = []
    fc.add_job(_elastic())
    for _ in range(3):
        plan = fc.step()
        memberships.extend(a.membership for a in plan.jobs if a.membership is not None)
    pods = {p["metadata"]["name"]: _env(p) for p in fc.job_pods(KEY)}
    assert sorted(pods) == ["el-d0-p0", "el-d1-p0", "el-d2-p0"]
    env = pods["el-d1-p0"]
    assert env["PET_NNODES"] == "2:4" and env["PET_RDZV_BACKEND"] == "c10d"
    # one stable name for every pod; torchrun infers the host from what the name resolves to
    assert {p["PET_RDZV_ENDPOINT"] for p in pods.values()} == {f"el-rdzv.ns.svc:{MASTER_PORT}"}
    assert all("PET_RDZV_CONF" not in p for p in pods.values())
    assert int(env["PET_MAX_RESTARTS"]) > 3 and "PET_NODE_RANK" not in env
    assert env["REPLICA_GROUP_ID"] == "1" and env["NUM_REPLICA_GROUPS"] == "3"
    labels = {p["metadata"]["name"]: p["metadata"]["labels"] for p in fc.job_pods(KEY)}
    assert labels["el-d1-p0"][REPLICA_GROUP_LABEL] == "1", "the rendezvous Service selects its host by it"
    assert memberships and memberships[-1]["data"]["replicaGroupIds"] == "0,1,2"
    # replica d1 dropped: d2 keeps its id (and pod), the ConfigMap lists 0 and 2
    victim = next(p["spec"]["nodeName"] for p in fc.job_pods(KEY) if p["metadata"]["name"] == "el-d1-p0")
    fc.nodes[victim] = node(victim, ready=False, leaf="leaf-0")
    memberships.clear()
    for _ in range(3):
        plan = fc.step()
        memberships.extend(a.membership for a in plan.jobs if a.membership is not None)
    assert sorted(p["metadata"]["name"] for p in fc.job_pods(KEY)) == ["el-d0-p0", "el-d2-p0"]
    assert memberships[-1]["data"]["replicaGroupIds"] == "0,2"
    assert memberships[-1]["metadata"]["name"] == "el-replicas"
    # room returns: the new replica takes the lowest free id
    fc.nodes[victim] = node(victim, leaf="leaf-0")
    fc.settle(3)
    assert sorted(p["metadata"]["name"] for p in fc.job_pods(KEY)) == ["el-d0-p0", "el-d1-p0", "el-d2-p0"]


def test_under_a_core_queue_policy_admitted_at_what_fits_and_growth_replicas_go_first() -> None:
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 4}") for i in range(4)],
                     policy=queue_policy("fair-backfill-preempt", 5))
    fc.add_job(paralleljob("filler", 8, 1, 1, memory=0.0, priority=-1))  # a lower-priority whole gang
    fc.settle(2)
    fc.add_job(_elastic())  # wants 4, 3 fit: admitted at 3 at once, not at min and grown later
    fc.settle(3)
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Running" and status["replicas"] == 3
    assert status["replicaRange"] == "3/4 (2..4)"
    assert any("admitted at 3 of 2..4 replicas" in m for _, r, m in fc.events if r == "Placed")
    assert "Grew" not in [r for _, r, _ in fc.events]
    before = _pods(fc)
    # a rigid higher-priority job takes the highest growth replica, not the lower-priority whole gang
    fc.add_job(paralleljob("urgent", 8, 1, 1, memory=0.0, priority=10))
    fc.settle(3)
    assert fc.phase("ns/urgent") == "Running" and fc.phase("ns/filler") == "Running"
    status = fc.job(KEY)["status"]
    assert status["phase"] == "Running" and status["replicas"] == 2
    assert status["elastic"]["lastResize"]["kind"] == "Shrank"
    assert "cheapest" in status["elastic"]["lastResize"]["reason"]
    assert _pods(fc) == {k: v for k, v in before.items() if k in _pods(fc)}  # the kept ones did not move
    assert max(before) not in _pods(fc)  # the highest replica went
    assert "PreemptionPending" not in str(fc.job("ns/filler")["status"].get("conditions"))


def test_the_rendezvous_service_follows_the_host_when_its_replica_is_dropped() -> None:
    fc = _cluster(3)
    services: list[dict[str, Any]] = []

    def step(n: int) -> None:
        for _ in range(n):
            plan = fc.step()
            services.extend(a.rendezvous for a in plan.jobs if a.rendezvous is not None)

    fc.add_job(_elastic())
    step(3)
    svc = services[-1]
    assert svc["metadata"]["name"] == "el-rdzv" and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True

    def selected() -> list[str]:
        want = svc["spec"]["selector"]
        return [p["metadata"]["name"] for p in fc.job_pods(KEY)
                if all(p["metadata"]["labels"].get(k) == v for k, v in want.items())]

    assert selected() == ["el-d0-p0"]  # exactly the host: the lowest replica's stage-0 pod
    # the host's replica is dropped (no spare): the Service is re-pointed at the lowest live replica
    host_node = next(p["spec"]["nodeName"] for p in fc.job_pods(KEY) if p["metadata"]["name"] == "el-d0-p0")
    fc.nodes[host_node] = node(host_node, ready=False, leaf="leaf-0")
    services.clear()
    step(3)
    assert sorted(p["metadata"]["name"] for p in fc.job_pods(KEY)) == ["el-d1-p0", "el-d2-p0"]
    svc = services[-1]
    assert selected() == ["el-d1-p0"]
    # the survivors' env is unchanged and still names the Service, so their restarted agents find it
    env = _env(next(p for p in fc.job_pods(KEY) if p["metadata"]["name"] == "el-d2-p0"))
    assert env["PET_RDZV_ENDPOINT"] == f"el-rdzv.ns.svc:{MASTER_PORT}"


def test_the_grew_event_names_the_new_replicas_pods_as_they_are_named() -> None:
    # The Grew Event said "replica 4" (a count from 1) for the pods named el-d3-p0 (ids from 0): name them.
    fc = _cluster(4)
    fc.add_job(paralleljob("filler", 8, 1, 1, memory=0.0))
    fc.settle(2)
    fc.add_job(_elastic())
    fc.settle(3)
    del fc.jobs["ns/filler"]
    fc.settle(3)
    assert "el-d3-p0" in _pods(fc)
    (grew,) = [m for _, r, m in fc.events if r == "Grew"]
    assert "new pods el-d3-p0" in grew and "replica 4" not in grew, grew

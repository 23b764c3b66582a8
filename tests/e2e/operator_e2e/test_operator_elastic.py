"""Elastic data parallelism on a real API server (issue 26): an elastic job (min 2, max 4 replicas of TP8) on
a cluster with room for 3 starts at 3, grows to 4 next to the others when a node frees, gives a growth
replica to a higher-priority rigid job, drops the rendezvous host's replica on a failed node without moving
the others (the ``<job>-rdzv`` Service is re-pointed at the new host), and ``kubectl scale`` sets its desired
size while the API refuses a size outside the range."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from pjhelpers import Jobs, assert_gang_on_record, assert_no_gpu_used_twice, wait_for
from tests.timings import record_time

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

LEAF = "network.topology.nvidia.com/leaf"


def kubectl(cluster: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


def pod_nodes(pjs: Jobs, name: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in pjs.live_pods(name) if p.spec.node_name}


def uids(pjs: Jobs, name: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in pjs.live_pods(name)}


def replicas(pjs: Jobs, name: str, count: int, timeout_s: float = 30.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = pjs.status(name)
        ok = status.get("phase") == "Running" and status.get("replicas") == count
        return status if ok and len(pod_nodes(pjs, name)) == count else None

    return dict(wait_for(f"{name} Running at {count} replicas", check, timeout_s, interval=0.05))


def rendezvous_pods(kube: KubeSession, pjs: Jobs) -> list[str]:
    """The live pods the job's rendezvous Service (el-rdzv) selects, read back from the API server."""
    svc = kube.run(kube.core.read_namespaced_service("el-rdzv", pjs.namespace))
    selector = ",".join(f"{k}={v}" for k, v in sorted(svc.spec.selector.items()))
    pods = kube.run(kube.core.list_namespaced_pod(pjs.namespace, label_selector=selector)).items
    return sorted(p.metadata.name for p in pods if p.metadata.deletion_timestamp is None)


def test_elastic_job_starts_at_what_fits_grows_shrinks_and_scales(
    pjs: Jobs, chaos: KubeSession, dev_cluster: DevCluster
) -> None:
    kube = chaos
    leaf = {n.metadata.name: n.metadata.labels[LEAF] for n in kube.run(kube.core.list_node()).items}
    fillers = [f"f{i}" for i in range(5)]
    for name in fillers:  # 5 of the 8 nodes: room for 3 replicas of TP8
        pjs.create(name, 8, 1, 1)
    for name in fillers:
        pjs.wait_phase(name, "Running")
    body = Jobs.manifest("el", 8, 1, 4)
    body["spec"]["parallelism"].update(minData=2, maxData=4)
    pjs.create_raw(body)
    status = replicas(pjs, "el", 3)
    assert status["replicaRange"] == "3/4 (2..4)" and "no free room" in status["elastic"]["notAtMax"]
    assert_gang_on_record(pjs, "el")
    slots = status["placement"]["pods"]
    anchor = next(p["node"] for p in slots if p["replica"] == 2)
    filler_node = {name: pjs.status(name)["nodes"] for name in fillers}
    near = next(n for n in fillers if leaf[filler_node[n]] == leaf[anchor])
    before = uids(pjs, "el")

    started = time.monotonic()
    pjs.delete(near)
    status = replicas(pjs, "el", 4, timeout_s=60)
    record_time("room freed -> elastic job grown to 4 replicas, the new pod bound", time.monotonic() - started,
                2.0, "paralleljob bench worker-crash (elastic growth)")  # fmt: skip
    new = {n: node for n, node in pod_nodes(pjs, "el").items() if n not in before}
    assert list(new.values()) == [filler_node[near]], new
    assert leaf[filler_node[near]] == leaf[anchor]  # next to the last replica: its DP ring stays in the leaf
    assert {n: u for n, u in uids(pjs, "el").items() if n in before} == before, "a running replica moved"
    assert status["elastic"]["lastResize"]["kind"] == "Grew"
    pjs.wait_events("el", {"Grew"})

    far = next(n for n in fillers if n != near)
    pjs.delete(far)
    wait_for(f"{far}'s pods gone", lambda: not pjs.pods(far))
    at_four = uids(pjs, "el")
    pjs.create("urgent", 8, 1, 2, priority=10)  # the free node plus one growth replica
    pjs.wait_phase("urgent", "Running")
    status = replicas(pjs, "el", 3)
    assert status["elastic"]["lastResize"]["kind"] == "Shrank"
    assert "cheapest" in status["elastic"]["lastResize"]["reason"]
    kept = uids(pjs, "el")
    assert len(set(at_four) - set(kept)) == 1 and all(at_four[n] == u for n, u in kept.items())
    pjs.wait_events("el", {"Shrank"})
    assert_gang_on_record(pjs, "urgent")

    # every node is taken now: a failed node's replica is dropped, the others stay. The failed one is the
    # rendezvous host's, the pod the job's el-rdzv Service selects: the Service moves to a survivor.
    kept_nodes = pod_nodes(pjs, "el")
    victim_pod = rendezvous_pods(kube, pjs)[0]
    assert victim_pod == next(s["name"] for s in status["placement"]["pods"] if s["nodeRank"] == 0)
    chaos.make_node_not_ready(kept_nodes[victim_pod])
    status = replicas(pjs, "el", 2)
    assert status["lastFailure"]["action"] == "DroppedReplica"
    # a drop restarts no pod: it is counted apart and never brings the job nearer maxRestarts
    assert status.get("restarts", 0) == 0 and status["elastic"]["drops"] == 1, status
    assert {n: u for n, u in uids(pjs, "el").items()} == {n: u for n, u in kept.items() if n != victim_pod}
    pjs.wait_events("el", {"DroppedReplica"})
    host = next(s["name"] for s in status["placement"]["pods"] if s["nodeRank"] == 0)
    assert host != victim_pod
    wait_for("el-rdzv re-pointed at the new host", lambda: rendezvous_pods(kube, pjs) == [host])
    # the workers are told: torchrun's elastic range and a stable replica id; the ConfigMap lists the live ones
    env = {e.name: e.value for e in pjs.live_pods("el")[0].spec.containers[0].env}
    assert env["PET_NNODES"] == "2:4" and env["PET_RDZV_BACKEND"] == "c10d" and "REPLICA_GROUP_ID" in env
    ids = sorted(int(n.split("-d")[1].split("-p")[0]) for n in uids(pjs, "el"))

    def membership() -> Any:
        data = kube.run(kube.core.read_namespaced_config_map("el-replicas", pjs.namespace)).data
        return data if data["replicaGroupIds"] == ",".join(map(str, ids)) else None

    assert wait_for("the replicas ConfigMap lists the live replicas", membership)["numReplicaGroups"] == "2"

    # kubectl scale: within the range it sets the desired size, outside it the API refuses with the range
    refused = kubectl(dev_cluster, "-n", pjs.namespace, "scale", "pj", "el", "--replicas=5")
    assert refused.returncode != 0 and "must be within minData..maxData" in refused.stderr, refused.stderr
    print(f"kubectl scale --replicas=5: {refused.stderr.strip()}")
    refused = kubectl(dev_cluster, "-n", pjs.namespace, "scale", "pj", "el", "--replicas=1")
    assert refused.returncode != 0 and "must be within minData..maxData" in refused.stderr, refused.stderr
    rigid = kubectl(dev_cluster, "-n", pjs.namespace, "scale", "pj", "f1", "--replicas=2")
    assert rigid.returncode != 0 and "immutable for a rigid job" in rigid.stderr, rigid.stderr
    done = kubectl(dev_cluster, "-n", pjs.namespace, "scale", "pj", "el", "--replicas=3")
    assert done.returncode == 0, done.stderr
    wait_for("desired 3 in the status", lambda: pjs.status("el").get("desiredReplicas") == 3)
    got = kubectl(dev_cluster, "-n", pjs.namespace, "get", "pj", "el", "-o", "jsonpath={.status.replicas}")
    assert got.stdout == "2"
    assert_no_gpu_used_twice(kube)

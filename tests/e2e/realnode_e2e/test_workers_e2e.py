"""Workers that really run: the stdlib worker (deploy/worker/worker.py) in a ParallelJob on two real nodes.

Each worker resolves MASTER_ADDR through CoreDNS, rendezvous every rank over TCP and checks world size,
node rank and its TP/PP/DP groups; its termination message (in the pod's status) is compared here with the
placement the operator recorded in the job's status.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pjhelpers import Jobs, wait_for
from realhelpers import REAL_NODE_GPUS, RealCluster, pod_log, worker_template

from paralleljob.devcluster.session import KubeSession


def wait_done(jobs: Jobs, name: str, timeout_s: float = 150.0, cluster: RealCluster | None = None) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        status = jobs.status(name)
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    try:
        return dict(wait_for(f"{name} finished", finished, timeout_s=timeout_s, interval=0.5))
    except AssertionError as exc:  # a run that hangs says where: the job, each pod, its last log lines
        pods = [f"{p.metadata.name} on {p.spec.node_name}: {p.status.phase}" for p in jobs.pods(name)]
        logs = {
            p.metadata.name: pod_log(cluster.cluster, jobs.namespace, p.metadata.name, "trainer")[-800:]
            for p in jobs.pods(name)
        } if cluster is not None else {}
        raise AssertionError(
            f"{exc}\nstatus: {jobs.status(name)}\npods: {pods}\nlogs: {logs}\noperator:\n{jobs.operator.log_tail()}"
        ) from None


def why_not_succeeded(jobs: Jobs, name: str, status: dict[str, Any], cluster: RealCluster) -> str:
    """What a job that did not succeed left behind, shortest first: its last failure and conditions, then
    each pod's containers as they ended (exit code, reason, termination message) and its log's tail. The
    whole status came first before, and pytest cut the message before any of this."""
    lines = [f"phase {status.get('phase')}; lastFailure: {status.get('lastFailure')}"]
    for c in status.get("conditions") or []:
        lines.append(f"  {c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}")
    for pod in jobs.pods(name):
        lines.append(f"pod {pod.metadata.name} on {pod.spec.node_name}: {pod.status.phase}")
        for container in pod.status.container_statuses or []:
            states = (container.state, container.last_state)  # the client leaves an absent state None
            ended = next((s.terminated for s in states if s is not None and s.terminated is not None), None)
            if ended is not None:
                message = (ended.message or "")[:400]
                lines.append(f"  {container.name}: exit {ended.exit_code} {ended.reason}: {message}")
        lines.append("  log: " + pod_log(cluster.cluster, jobs.namespace, pod.metadata.name, "trainer")[-600:])
    return "\n".join(lines)


def summaries(kube: KubeSession, namespace: str, job: str) -> dict[str, dict[str, Any]]:
    pods = kube.run(kube.core.list_namespaced_pod(namespace, label_selector=f"paralleljob.dev/job={job}")).items
    found = {}
    for pod in pods:
        for status in pod.status.container_statuses or []:
            terminated = status.state.terminated
            if terminated and terminated.exit_code == 0 and terminated.message:
                found[pod.metadata.name] = json.loads(terminated.message)
    return found


def check_against_status(status: dict[str, Any], found: dict[str, dict[str, Any]]) -> set[str]:
    """Every worker's view matches the job's status; returns the nodes the job ran on."""
    placement = status["placement"]
    pods = {p["name"]: p for p in placement["pods"]}
    shape = placement["shape"]
    world = shape["tensor"] * shape["pipeline"] * shape["data"]
    assert sorted(found) == sorted(pods)
    master_pod = next(p for p in pods.values() if p["nodeRank"] == 0)
    for name, summary in found.items():
        recorded = pods[name]
        assert summary["problems"] == [], summary
        assert summary["worldSize"] == world
        assert summary["nodeRank"] == recorded["nodeRank"]
        assert summary["ranks"] == recorded["ranks"]
        assert len(summary["gpus"]) == shape["tensor"]
        # Every rank saw the same table: rank -> the pod the job's status records for it.
        for rank, (pod_name, _ip) in summary["peers"].items():
            assert int(rank) in pods[pod_name]["ranks"]
        assert summary["peers"]["0"][0] == master_pod["name"]
        assert summary["masterIp"] == found[master_pod["name"]]["peers"]["0"][1]
    return {p["node"] for p in pods.values()}


def test_tp2_pp2_dp2_over_two_real_nodes_succeeds(real_cluster: RealCluster, real_pjs: Jobs) -> None:
    jobs, kube = real_pjs, real_pjs.kube
    started = time.monotonic()
    jobs.create("train", 2, 2, 2, template=worker_template(real_cluster.worker_image))
    status = wait_done(jobs, "train", cluster=real_cluster)
    elapsed = time.monotonic() - started
    assert status["phase"] == "Succeeded", why_not_succeeded(jobs, "train", status, real_cluster)
    found = summaries(kube, jobs.namespace, "train")
    assert check_against_status(status, found) == {"real-node-0", "real-node-1"}
    print(f"TP2xPP2xDP2 on two real nodes: Succeeded in {elapsed:.1f} s")


def test_a_failing_worker_is_restarted_by_the_failure_policy(real_cluster: RealCluster, real_pjs: Jobs) -> None:
    jobs, kube = real_pjs, real_pjs.kube
    env = {"WORKER_FAIL_NODE_RANK": "1", "WORKER_FAIL_INCARNATION": "0"}
    jobs.create("flaky", 2, 2, 1, template=worker_template(real_cluster.worker_image, env))
    status = wait_done(jobs, "flaky", timeout_s=180)
    assert status["phase"] == "Succeeded", status
    assert status.get("restarts", 0) >= 1 or any(p["incarnation"] >= 1 for p in status["placement"]["pods"]), status
    check_against_status(status, summaries(kube, jobs.namespace, "flaky"))
    # The replacement pod was admitted by the kubelet: its GPUs were free (no UnexpectedAdmissionError).
    events = kube.run(kube.core.list_namespaced_event(jobs.namespace)).items
    reasons = {(e.involved_object.name, e.reason) for e in events if e.source and e.source.component == "kubelet"}
    print(sorted(reasons))
    assert not [r for r in reasons if r[1] == "UnexpectedAdmissionError"], reasons


def test_a_stopped_kubelet_makes_its_node_not_ready_and_the_job_is_repaired(
    real_cluster: RealCluster, real_pjs: Jobs
) -> None:
    from paralleljob.devcluster.nodes import is_ready
    from paralleljob.devcluster.realnodes import restart_kubelet, stop_kubelet, wait_ready_with_gpus

    jobs, kube = real_pjs, real_pjs.kube
    template = worker_template(real_cluster.worker_image)
    template["spec"]["containers"][0]["command"] = ["python3", "-c", "import time; time.sleep(900)"]
    # python as PID 1 ignores SIGTERM: without this each deletion would wait the default 30 s grace period.
    template["spec"]["terminationGracePeriodSeconds"] = 1
    jobs.create("longrun", 2, 1, 1, template=template)
    status = jobs.wait_phase("longrun", "Running", timeout_s=60)
    first = status["placement"]["pods"][0]
    wait_for("the worker running", lambda: [p for p in jobs.live_pods("longrun") if p.status.phase == "Running"])
    name = real_cluster.cluster.name
    stopped_at = time.monotonic()
    stop_kubelet(name, first["node"])
    try:
        wait_for(
            f"{first['node']} NotReady",
            lambda: not is_ready(kube.run(kube.core.read_node(first["node"]))),
            timeout_s=90,
            interval=0.5,
        )
        not_ready_s = time.monotonic() - stopped_at

        def moved() -> dict[str, Any] | None:
            pods = jobs.status("longrun").get("placement", {}).get("pods", [])
            return pods[0] if pods and pods[0]["node"] != first["node"] else None

        moved_to = wait_for("the job re-placed off the NotReady node", moved, timeout_s=90, interval=0.5)
        running = wait_for(
            "the replacement running",
            lambda: [
                p for p in jobs.live_pods("longrun")
                if p.spec.node_name == moved_to["node"] and p.status.phase == "Running"
            ],
            timeout_s=90,
        )  # fmt: skip
        repaired_s = time.monotonic() - stopped_at
        assert running
        print(f"kubelet stopped: NotReady after {not_ready_s:.1f} s, replacement Running after {repaired_s:.1f} s")
    finally:
        restart_kubelet(name, first["node"], die_with_parent=True)
        # Ready comes before the GPUs: the device plugin re-registers with the new kubelet a moment later,
        # and a test after this one must find the node as the session started it.
        asyncio.run(wait_ready_with_gpus(real_cluster.cluster.kubeconfig, [first["node"]], REAL_NODE_GPUS, 90))

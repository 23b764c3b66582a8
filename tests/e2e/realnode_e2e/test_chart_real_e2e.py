"""The chart with the image built here, installed onto the real nodes: the operator runs as two pods under
its ServiceAccount (in-cluster config through the `kubernetes` Service IP, the chart's RBAC and nothing
else), its readiness probe passes through the kubelet, one replica leads, and deleting the leader's pod
hands the lease over. The new leader places a job on the real nodes; then the agent DaemonSet (fake NVML,
`agent.fakeNvml`) is added with `helm upgrade`: one agent pod Running on each real node under its own
ServiceAccount reports the GPU under the job lost (XID 79), the in-cluster operator moves the job off it,
and the agents clear the nodes again when the script says the GPU recovered."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from pjhelpers import Jobs, jobs_in, wait_for
from realhelpers import InClusterOperator, RealCluster, worker_template

from paralleljob.devcluster.realnodes import load_image
from paralleljob.devcluster.session import KubeSession
from paralleljob.devcluster.versions import repo_root
from paralleljob.packaging.helm import ensure_helm
from paralleljob.packaging.image import build_operator_image

NAMESPACE = "paralleljob-system"
# The README's release name: the chart's objects are then paralleljob*, and its metrics Service's service link
# PARALLELJOB_METRICS_PORT=tcp://... once crash-looped the operator here (a release `pj` never met it).
RELEASE = "paralleljob"
LEASE = "paralleljob-operator"
REAL_NODES = ("real-node-0", "real-node-1")
REAL_ONLY = '{"paralleljob.dev/real-node":"true"}'


def node_signals(kube: KubeSession, name: str) -> tuple[str | None, Any]:
    node = kube.run(kube.core.read_node(name))
    annotation = (node.metadata.annotations or {}).get("paralleljob.dev/unhealthy-gpus")
    condition = next((c for c in node.status.conditions or [] if c.type == "GPUHealthy"), None)
    return annotation, condition


def test_chart_runs_the_operator_and_the_agent_on_real_nodes(
    real_cluster: RealCluster, real_kube: KubeSession, real_namespace: str, tmp_path: Path
) -> None:
    cluster, kube = real_cluster.cluster, real_kube
    tag, archive = build_operator_image(lambda _: None)
    load_image(cluster.name, cluster.run_dir, archive)
    repository, version = tag.rsplit(":", 1)
    helm = [str(ensure_helm(lambda _: None)), "--kubeconfig", str(cluster.kubeconfig)]
    install = [
        *helm, "install", RELEASE, str(repo_root() / "charts/paralleljob"),
        "--namespace", NAMESPACE, "--create-namespace", "--wait", "--timeout", "120s",
        "--set", f"image.repository={repository}", "--set", f"image.tag={version}", "--set", "image.pullPolicy=Never",
        "--set", "operator.replicas=2", "--set-json", f"operator.nodeSelector={REAL_ONLY}",
    ]  # fmt: skip
    try:
        result = subprocess.run(install, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        pods = kube.run(kube.core.list_namespaced_pod(NAMESPACE)).items
        assert len(pods) == 2 and {p.spec.node_name for p in pods} <= set(REAL_NODES)
        for pod in pods:
            assert pod.spec.service_account_name != "default"
            assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
            assert pod.spec.enable_service_links is False
            assert all(c.restart_count == 0 for c in pod.status.container_statuses), pod.status.container_statuses
        operator = InClusterOperator(cluster, kube, NAMESPACE, LEASE)

        def holder() -> str:
            leader = operator.leader()
            return str(leader.metadata.name) if leader is not None else ""

        leader = wait_for("a leader", lambda: holder() in {p.metadata.name for p in pods} and holder(), 60)
        deleted_at = time.monotonic()
        kube.run(kube.core.delete_namespaced_pod(leader, NAMESPACE))
        new_leader = wait_for("another leader", lambda: holder() not in ("", leader) and holder(), 60, 0.2)
        print(f"leader {leader} deleted: {new_leader} leads after {time.monotonic() - deleted_at:.1f} s")

        with jobs_in(kube, real_namespace, operator, check_view=False) as jobs:  # type: ignore[arg-type]
            _agent_reports_a_lost_gpu_and_the_operator_moves_the_job(jobs, helm, real_cluster.worker_image, tmp_path)
    finally:
        uninstall_leaving_nothing(kube, helm)


def uninstall_leaving_nothing(kube: KubeSession, helm: list[str]) -> None:
    """The release and its namespace go (the Lease, the leader's identity, the agents' pods with it), and the
    nodes are back as the session made them, so that the tests after this one meet the cluster they would
    meet without it: no operator pod, no agent still writing health, no GPU marked."""
    subprocess.run([*helm, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"], capture_output=True, check=False)
    kube.run(kube.core.delete_namespace(NAMESPACE))

    def gone() -> bool:
        return NAMESPACE not in {n.metadata.name for n in kube.run(kube.core.list_namespace()).items}

    wait_for(f"namespace {NAMESPACE} and everything in it gone", gone, 120, 0.5)
    for name in REAL_NODES:
        annotation, _ = node_signals(kube, name)
        assert annotation is None, f"{name} still has GPUs marked unhealthy after the chart left: {annotation}"


def _agent_reports_a_lost_gpu_and_the_operator_moves_the_job(
    jobs: Jobs, helm: list[str], image: str, tmp_path: Path
) -> None:
    kube = jobs.kube
    template = worker_template(image)
    template["spec"]["containers"][0]["command"] = ["python3", "-c", "import time; time.sleep(900)"]
    template["spec"]["terminationGracePeriodSeconds"] = 1  # python as PID 1 ignores SIGTERM
    jobs.create("health", 2, 1, 1, template=template)
    before = jobs.wait_phase("health", "Running", timeout_s=90)
    victim = before["placement"]["pods"][0]
    node, gpu = victim["node"], victim["gpuIndices"][0]

    # Every agent replays this: the job's GPU index lost (XID 79) at poll 2, answering again at poll 30.
    script = tmp_path / "fake-nvml.yaml"
    script.write_text(
        f"gpus: 4\nsteps:\n  - {{poll: 2, gpu: {gpu}, xid: 79, set: {{lost: true}}}}\n"
        f"  - {{poll: 30, gpu: {gpu}, set: {{lost: false}}}}\n"
    )
    upgrade = [
        *helm, "upgrade", RELEASE, str(repo_root() / "charts/paralleljob"), "--namespace", NAMESPACE,
        "--reuse-values",
        "--set", "agent.enabled=true", "--set", "agent.runtimeClassName=",
        "--set-json", f"agent.nodeSelector={REAL_ONLY}",
        "--set", "agent.intervalSeconds=1", "--set", "agent.recoverPolls=1", "--set", "agent.holdSeconds=0",
        "--set-file", f"agent.fakeNvml={script}",
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(upgrade, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr

    def marked() -> Any:
        annotation, condition = node_signals(kube, node)
        return condition if annotation == str(gpu) and condition is not None and condition.status == "False" else None

    condition = wait_for(f"the agent on {node} marks GPU {gpu}", marked, timeout_s=60, interval=0.5)
    assert condition.reason == "XID79", condition
    agents = [
        p for p in kube.run(kube.core.list_namespaced_pod(NAMESPACE)).items
        if p.metadata.labels.get("app.kubernetes.io/component") == "agent"
    ]  # fmt: skip
    assert sorted(p.spec.node_name for p in agents) == sorted(REAL_NODES), [p.spec.node_name for p in agents]
    for pod in agents:
        assert pod.status.phase == "Running" and pod.spec.service_account_name.endswith("-agent")
        assert "--fake-nvml=/etc/paralleljob/fake-nvml/script.yaml" in pod.spec.containers[0].args

    status = jobs.wait_phase("health", "Running", timeout_s=60, restarts=1)
    repaired_s = time.monotonic() - started
    assert status["lastFailure"]["kind"] == "GPUFailure", status
    for pod in status["placement"]["pods"]:  # both agents reported the index: no node may use it
        assert gpu not in pod["gpuIndices"], f"{pod['name']} still on GPU {gpu} of {pod['node']}"

    def cleared() -> bool:
        signals = [node_signals(kube, name) for name in REAL_NODES]
        return all(a is None and c is not None and c.status == "True" for a, c in signals)

    wait_for("the agents clear both nodes after the GPU recovered", cleared, timeout_s=90, interval=0.5)
    print(f"agent DaemonSet on the real nodes: XID 79 to the job repaired off GPU {gpu}: {repaired_s:.1f} s")

"""Smoke tests of the local control plane itself: what the operator relies on behaves as on a real cluster.

Binding through ``pods/binding`` with a UID precondition, kwok running and completing pods, node chaos, and
the benchmark operator's user queued by API Priority and Fairness like any controller's.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION, FAIL_AFTER_ANNOTATION
from paralleljob.devcluster.nodes import GPU_RESOURCE, LEAF_LABEL, UNHEALTHY_GPUS_ANNOTATION
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools.bench_identity import queued_operator_kubeconfig
from paralleljob.k8s.runtime.api import Kube

pytestmark = pytest.mark.e2e

SCHEDULER_NAME = "paralleljob-scheduler"
PRIORITY_LEVELS = "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations"


def worker_pod(name: str, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {GPU_RESOURCE: str(gpus), "cpu": "1", "memory": "1Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "restartPolicy": "Never",
            "containers": [
                {"name": "worker", "image": "trainer:dev", "resources": {"requests": resources, "limits": resources}}
            ],
        },
    }


def wait_pod_phase(kube: KubeSession, namespace: str, name: str, phase: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        pod = kube.run(kube.core.read_namespaced_pod(name, namespace))
        if pod.status.phase == phase:
            return pod
        assert time.monotonic() < deadline, f"pod {name} is {pod.status.phase}, not {phase}, after {timeout_s} s"
        time.sleep(0.1)


def test_bind_with_uid_precondition_and_kwok_runs_the_pod(kube: KubeSession, namespace: str) -> None:
    node = kube.shape.node_name(0)
    pod = kube.run(kube.core.create_namespaced_pod(namespace, worker_pod("w-d0-p0", gpus=4)))
    assert pod.spec.scheduler_name == SCHEDULER_NAME
    time.sleep(0.5)
    pending = kube.run(kube.core.read_namespaced_pod(pod.metadata.name, namespace))
    assert pending.status.phase == "Pending" and not pending.spec.node_name, "nothing else may schedule it"

    status, body = kube.bind_pod(namespace, pod.metadata.name, "00000000-0000-0000-0000-000000000000", node)
    assert status == 409, body
    assert "Precondition failed" in body.get("message", ""), body

    status, body = kube.bind_pod(namespace, pod.metadata.name, pod.metadata.uid, node)
    assert status == 201, body

    running = wait_pod_phase(kube, namespace, pod.metadata.name, "Running")
    assert running.spec.node_name == node
    assert running.status.pod_ip and all(c.ready for c in running.status.container_statuses)

    status, body = kube.bind_pod(namespace, pod.metadata.name, pod.metadata.uid, kube.shape.node_name(1))
    assert status == 409, "a bound pod cannot be bound again"


def test_kwok_completes_and_fails_pods_on_request(kube: KubeSession, namespace: str) -> None:
    node = kube.shape.node_name(1)
    done = kube.run(
        kube.core.create_namespaced_pod(namespace, worker_pod("done", 1, {COMPLETE_AFTER_ANNOTATION: "1s"}))
    )
    crash = worker_pod("crash", 1, {FAIL_AFTER_ANNOTATION: "1s", EXIT_CODE_ANNOTATION: "137"})
    crashed = kube.run(kube.core.create_namespaced_pod(namespace, crash))
    for pod in (done, crashed):
        assert kube.bind_pod(namespace, pod.metadata.name, pod.metadata.uid, node)[0] == 201

    wait_pod_phase(kube, namespace, "done", "Succeeded")
    failed = wait_pod_phase(kube, namespace, "crash", "Failed")
    assert failed.status.container_statuses[0].state.terminated.exit_code == 137


def test_node_chaos_not_ready_unhealthy_gpus_and_deletion(chaos: KubeSession) -> None:
    sick, doomed = chaos.shape.node_name(2), chaos.shape.node_name(3)

    chaos.make_node_not_ready(sick, reason="GPUFellOffTheBus")
    chaos.wait_node_ready(sick, ready=False, timeout_s=60)
    condition = next(c for c in chaos.run(chaos.core.read_node(sick)).status.conditions if c.type == "Ready")
    assert (condition.status, condition.reason) == ("False", "GPUFellOffTheBus")

    chaos.set_unhealthy_gpus(sick, [3, 1])
    annotations = chaos.run(chaos.core.read_node(sick)).metadata.annotations
    assert annotations[UNHEALTHY_GPUS_ANNOTATION] == "1,3"

    chaos.heal_node(sick)
    chaos.wait_node_ready(sick, ready=True, timeout_s=60)

    chaos.delete_node(doomed)
    with pytest.raises(ApiException) as missing:
        chaos.run(chaos.core.read_node(doomed))
    assert missing.value.status == 404


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_sees_gpu_nodes_with_labels_and_capacity(dev_cluster: DevCluster, kube: KubeSession) -> None:
    listed = subprocess.run(
        ["kubectl", "--kubeconfig", str(dev_cluster.kubeconfig), "get", "nodes", "-o", "json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    items = {item["metadata"]["name"]: item for item in json.loads(listed.stdout)["items"]}
    assert set(kube.shape.names()) <= set(items)
    first = items[kube.shape.node_name(0)]
    assert first["status"]["allocatable"][GPU_RESOURCE] == str(kube.shape.gpus_per_node)
    assert first["metadata"]["labels"]["nvidia.com/gpu.product"] == kube.shape.gpu_product
    racks = {items[name]["metadata"]["labels"][LEAF_LABEL] for name in kube.shape.names()}
    assert len(racks) == kube.shape.count // kube.shape.nodes_per_rack


def test_restore_nodes_undoes_every_kind_of_damage(chaos: KubeSession) -> None:
    node = chaos.shape.node_name(4)
    patch = {
        "metadata": {"labels": {"nvidia.com/gpu.memory": "lots"}},
        "spec": {"unschedulable": True, "taints": [{"key": "maintenance", "effect": "NoSchedule"}]},
    }
    chaos.run(chaos.core.patch_node(node, patch))
    chaos.set_gpu_healthy_condition(node, healthy=False)
    chaos.set_unhealthy_gpus(node, [0])
    chaos.make_node_not_ready(node)
    chaos.wait_node_ready(node, ready=False, timeout_s=60)
    damaged = chaos.run(chaos.core.read_node(node))
    assert any(c.type == "GPUHealthy" and c.status == "False" for c in damaged.status.conditions)

    chaos.restore_nodes()

    restored = chaos.run(chaos.core.read_node(node))
    assert restored.metadata.labels["nvidia.com/gpu.memory"] == str(chaos.shape.gpu_memory_mib)
    assert not restored.spec.unschedulable and not restored.spec.taints
    assert UNHEALTHY_GPUS_ANNOTATION not in (restored.metadata.annotations or {})
    assert {c.type: c.status for c in restored.status.conditions}.get("GPUHealthy") is None
    chaos.wait_node_ready(node, ready=True, timeout_s=1)


def get_as(kubeconfig: Path, path: str) -> tuple[Any, str]:
    """GET ``path`` with these credentials: the body, and the UID of the API Priority and Fairness level the
    request was classified into (the API server names it in a response header)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    request = urllib.request.Request(cluster["server"] + path, headers={"Authorization": f"Bearer {user['token']}"})
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return json.loads(response.read()), str(response.headers["X-Kubernetes-PF-PriorityLevel-UID"])


def test_benchmark_operator_user_queues_where_kueue_does(dev_cluster: DevCluster, kube: KubeSession) -> None:
    """Side by side with Kueue, the operator must not be exempt from APF's queues while Kueue waits in them."""

    async def grant() -> Path:
        admin = await Kube.connect(str(dev_cluster.kubeconfig))
        try:
            return await queued_operator_kubeconfig(admin, dev_cluster)
        finally:
            await admin.close()

    operator_kubeconfig = kube.run(grant())
    levels, admin_level = get_as(dev_cluster.kubeconfig, PRIORITY_LEVELS)
    name_of = {item["metadata"]["uid"]: item["metadata"]["name"] for item in levels["items"]}
    _, operator_level = get_as(operator_kubeconfig, "/api/v1/namespaces/default/pods")
    assert name_of[admin_level] == "exempt"
    assert name_of[operator_level] == "global-default"

"""The operator beside the real kube-scheduler on one DRA cluster (issue 13, done-means "no device is in two
allocated claims, including a claim allocated by kube-scheduler for a plain pod on the same node").

kube-scheduler 1.36 (the project's own build, ``devtools/kubescheduler.py``) runs with its defaults, so its
DynamicResources plugin allocates the claims of plain pods (``schedulerName: default-scheduler``) made from
a ResourceClaimTemplate by kube-controller-manager's resourceclaim controller. Both schedulers then share
the same 32 devices: the operator must count kube-scheduler's allocations as used, and kube-scheduler must
never hand out a device the operator's claims hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drahelpers import (
    RESOURCE,
    assert_claims_match_placement,
    assert_no_device_in_two_claims,
    claim_devices,
    claims,
    custom,
)
from pjhelpers import Jobs, wait_for
from tests.e2e.surfaces import paralleljob_cli

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.dra import device_uuid
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools.browser import DashboardProcess
from paralleljob.devtools.kubescheduler import ensure_kube_scheduler, start_kube_scheduler

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def kube_scheduler(dra_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """kube-scheduler against the DRA cluster for this module; yields its log file."""
    binary = ensure_kube_scheduler(lambda message: print(message, file=sys.stderr, flush=True))
    workdir = tmp_path_factory.mktemp("kube-scheduler")
    proc = start_kube_scheduler(binary, dra_cluster.kubeconfig, workdir)
    try:
        yield workdir / "kube-scheduler-50.log"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _template(kube: KubeSession, namespace: str, name: str, count: int) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            }
        },
    }
    kube.run(custom(kube).create_namespaced_custom_object(*RESOURCE, namespace, "resourceclaimtemplates", body))


def _plain_pod(kube: KubeSession, namespace: str, name: str, gpus: int) -> None:
    """A pod for kube-scheduler (the default schedulerName) whose GPUs come from a claim of a template."""
    _template(kube, namespace, f"{name}-gpus", gpus)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"{name}-gpus"}],
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }
    kube.run(kube.core.create_namespaced_pod(namespace, body))


def _pod_claim(kube: KubeSession, namespace: str, pod_name: str) -> dict[str, Any] | None:
    """The claim the resourceclaim controller made for the pod, once kube-scheduler has allocated it."""
    pod = kube.run(kube.core.read_namespaced_pod(pod_name, namespace))
    statuses = pod.status.resource_claim_statuses or []
    if not statuses or not statuses[0].resource_claim_name:
        return None
    claim = claims(kube, namespace).get(statuses[0].resource_claim_name)
    return claim if claim is not None and claim_devices(claim) else None


def _scheduled_by_kube_scheduler(kube: KubeSession, namespace: str, pod_name: str) -> dict[str, Any]:
    claim = wait_for(
        f"kube-scheduler allocates the claim of {pod_name}",
        lambda: _pod_claim(kube, namespace, pod_name),
        timeout_s=60,
    )
    pod = wait_for(
        f"{pod_name} bound",
        lambda: (p := kube.run(kube.core.read_namespaced_pod(pod_name, namespace))).spec.node_name and p,
        timeout_s=30,
    )
    assert pod.spec.scheduler_name == "default-scheduler"
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": pod_name, "uid": pod.metadata.uid}]
    assert {pool for pool, _ in claim_devices(claim)} == {pod.spec.node_name}
    assert "paralleljob.dev/job" not in (claim["metadata"].get("labels") or {}), "not one of the operator's"
    return claim


def _unschedulable(kube: KubeSession, namespace: str, pod_name: str) -> bool:
    pod = kube.run(kube.core.read_namespaced_pod(pod_name, namespace))
    conditions = pod.status.conditions or []
    return not pod.spec.node_name and any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable" for c in conditions
    )


def test_kube_scheduler_and_the_operator_never_allocate_one_device_twice(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, dra_namespace: str, kube_scheduler: Path
) -> None:
    total = len(dra_cluster.nodes) * dra_cluster.shape.gpus_per_node  # 32
    # kube-scheduler first: a plain pod takes two devices of some node through its claim.
    _plain_pod(dra_kube, dra_namespace, "plain-a", 2)
    held_by_a = set(claim_devices(_scheduled_by_kube_scheduler(dra_kube, dra_namespace, "plain-a")))
    assert len(held_by_a) == 2

    # The operator then fills every other device: 15 TP2 groups, none on plain-a's devices.
    dra_pjs.create("fill", tp=2, pp=1, dp=(total - 2) // 2)
    dra_pjs.wait_phase("fill", "Running", timeout_s=90)
    assert_claims_match_placement(dra_pjs, dra_kube, "fill")
    devices = assert_no_device_in_two_claims(dra_kube)
    assert len(devices) == total, "the whole cluster is allocated, once"

    # kube-scheduler now finds no free device: it must not pick one of the operator's.
    _plain_pod(dra_kube, dra_namespace, "plain-b", 1)
    wait_for("plain-b unschedulable", lambda: _unschedulable(dra_kube, dra_namespace, "plain-b"), timeout_s=30)
    assert _pod_claim(dra_kube, dra_namespace, "plain-b") is None
    dra_kube.run(dra_kube.core.delete_namespaced_pod("plain-b", dra_namespace, grace_period_seconds=0))
    wait_for(
        "plain-b gone",
        lambda: (
            "plain-b"
            not in {p.metadata.name for p in dra_kube.run(dra_kube.core.list_namespaced_pod(dra_namespace)).items}
        ),
        timeout_s=30,
    )

    # The other way round: the operator holds 28 devices (7 TP4 groups), and kube-scheduler must give a
    # second plain pod exactly the two devices that neither plain-a's claim nor the operator's hold.
    dra_pjs.delete("fill")
    wait_for(
        "fill's claims deleted",
        lambda: all(c["metadata"]["name"].startswith("plain-") for c in claims(dra_kube, dra_namespace).values()),
        timeout_s=30,
    )
    dra_pjs.create("most", tp=4, pp=1, dp=7)
    dra_pjs.wait_phase("most", "Running", timeout_s=90)
    assert_claims_match_placement(dra_pjs, dra_kube, "most")
    operator_devices = {
        device
        for c in claims(dra_kube, dra_namespace).values()
        if "paralleljob.dev/job" in (c["metadata"].get("labels") or {})
        for device in claim_devices(c)
    }
    assert len(operator_devices) == 28 and not operator_devices & held_by_a
    everything = {(node, f"gpu-{i}") for node in dra_cluster.nodes for i in range(dra_cluster.shape.gpus_per_node)}
    _plain_pod(dra_kube, dra_namespace, "plain-c", 2)
    held_by_c = set(claim_devices(_scheduled_by_kube_scheduler(dra_kube, dra_namespace, "plain-c")))
    assert held_by_c == everything - operator_devices - held_by_a
    assert len(assert_no_device_in_two_claims(dra_kube)) == total


def _cli(kubeconfig: Path, *args: str) -> str:
    """``paralleljob ARGS`` in this process, as the CLI e2e runs it; returns stdout."""
    return paralleljob_cli(kubeconfig, *args, columns=250)


def test_status_and_describe_show_dra_gpus_devices_and_uuids(
    dra_pjs: Jobs,
    dra_kube: KubeSession,
    dra_cluster: DevCluster,
    dra_namespace: str,
    kube_scheduler: Path,
    tmp_path: Path,
) -> None:
    _plain_pod(dra_kube, dra_namespace, "plain", 1)
    (theirs,) = claim_devices(_scheduled_by_kube_scheduler(dra_kube, dra_namespace, "plain"))
    dra_pjs.create("shown", tp=2, pp=1, dp=2)
    status = dra_pjs.wait_phase("shown", "Running", timeout_s=60)
    kubeconfig = dra_cluster.kubeconfig

    gpu_map = json.loads(_cli(kubeconfig, "status", "-o", "json"))
    assert gpu_map["totals"]["total"] == 32 and gpu_map["totals"]["used"] == 5
    cells = {(row["name"], cell["index"]): cell for row in gpu_map["nodes"] for cell in row["gpus"]}
    for (node, index), cell in cells.items():
        assert (cell["device"], cell["uuid"]) == (f"gpu-{index}", device_uuid(node, index))
    pool, device = theirs
    assert cells[(pool, int(device.removeprefix("gpu-")))]["holder"] == f"claims:{pool}"
    key = f"{dra_namespace}/shown"
    for slot in status["placement"]["pods"]:
        for index in slot["gpuIndices"]:
            assert cells[(slot["node"], index)]["holder"] == key

    described = json.loads(_cli(kubeconfig, "describe", key, "-o", "json"))
    record = {p["name"]: p for p in status["placement"]["pods"]}
    assert sorted(p["name"] for p in described["pods"]) == sorted(record)
    for line in described["pods"]:
        slot = record[line["name"]]
        assert line["devices"] == [f"gpu-{i}" for i in slot["gpuIndices"]]
        assert line["uuids"] == [device_uuid(slot["node"], i) for i in slot["gpuIndices"]]
    table = _cli(kubeconfig, "describe", key)
    first = record[described["pods"][0]["name"]]
    assert f"gpu-{first['gpuIndices'][0]}={device_uuid(first['node'], first['gpuIndices'][0])}" in table

    # the web view's job panel: the same devices, and the ResourceClaim each pod holds them through
    web = DashboardProcess(kubeconfig, tmp_path / "dashboard.log")
    web.start()
    try:
        with urllib.request.urlopen(f"{web.url}api/job/{dra_namespace}/shown", timeout=30) as response:
            panel = json.loads(response.read())
    finally:
        web.stop()
    assert sorted(p["name"] for p in panel["pods"]) == sorted(record)
    for line in panel["pods"]:
        slot = record[line["name"]]
        pod = dra_kube.run(dra_kube.core.read_namespaced_pod(line["name"], dra_namespace))
        assert line["devices"] == [f"gpu-{i}" for i in slot["gpuIndices"]]
        assert line["uuids"] == [device_uuid(slot["node"], i) for i in slot["gpuIndices"]]
        assert line["claims"] == [c.resource_claim_name for c in pod.spec.resource_claims]

"""The GPU chosen is the GPU used, enforced by a real kubelet: DRA claims prepared by our DRA kubelet plugin
(``deploy/devcluster/fakedra``) and applied by containerd 2.x through CDI, on two real nodes of six fake
GPUs each (``up --gpu-api dra --real-nodes 2 --real-node-gpus 6``).

Every worker prints, from inside its container, what CDI gave it (``NVIDIA_VISIBLE_DEVICES``, one UUID
variable per device, the file ``/run/paralleljob/gpus``); the test compares that with the claim's allocation,
the pod's ``paralleljob.dev/gpu-indices`` annotation and the job's recorded placement, and fails if a
container sees any other device. A NoExecute DeviceTaintRule on a device in use then leads to the repair,
and the replacement's container sees its new devices, never the tainted one.

The cluster is this module's own (its API server runs with DRA's flags), up for the module only.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dra_e2e"))
from drahelpers import assert_claims_match_placement, claim_devices, claims
from pjhelpers import Jobs, OperatorProcess, jobs_in, running, wait_for
from realhelpers import RealCluster, real_cluster_up, worker_template

from paralleljob.devcluster.dra import DRIVER, device_uuid
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

# Short: the kubelet dials the plugin's registration socket under the run directory (107 bytes at most).
PREFIX = "e2e-rdra-"
# One kwok node besides the two real ones: the job is held to the real ones by the template's selector.
SHAPE = NodeShape(count=1, gpus_per_node=8, nodes_per_rack=1, gpu_api="dra")
# Six per node: TP2xPP2xDP2 (8 GPUs) still spans both nodes, and a tainted GPU leaves a free pair for the
# repair (with four each the job fills both nodes and a repair has nowhere to go: it waits in the queue).
GPUS_PER_NODE = 6
GPU_INDICES = "paralleljob.dev/gpu-indices"

# What the worker prints once, then it idles so that the taint finds it running.
REPORT = """
import json, os, pathlib, sys, time
listing = pathlib.Path("/run/paralleljob/gpus")
print(json.dumps({
    "visible": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
    "devices": os.environ.get("PARALLELJOB_FAKE_GPU_DEVICES"),
    "uuids": {k: v for k, v in os.environ.items() if k.startswith("PARALLELJOB_FAKE_GPU_") and k.endswith("_UUID")},
    "listing": listing.read_text() if listing.exists() else None,
}), flush=True)
time.sleep(3600)
"""


@pytest.fixture(scope="module")
def dra_real(pytestconfig: pytest.Config) -> Iterator[RealCluster]:
    with real_cluster_up(pytestconfig, PREFIX, SHAPE, GPUS_PER_NODE, "real DRA nodes") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def dra_real_kube(dra_real: RealCluster) -> Iterator[KubeSession]:
    with KubeSession(dra_real.cluster.kubeconfig, dra_real.cluster.shape) as session:
        yield session


@pytest.fixture
def dra_real_pjs(
    dra_real: RealCluster, dra_real_kube: KubeSession, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Jobs]:
    kube = dra_real_kube
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    namespace = f"{slug}-{secrets.token_hex(3)}"
    kube.run(kube.core.create_namespace({"metadata": {"name": namespace}}))
    try:
        with (
            running(OperatorProcess(dra_real.cluster.kubeconfig, tmp_path, "e2e-real-dra")) as operator,
            jobs_in(kube, namespace, operator, check_view=True) as jobs,
        ):
            yield jobs
    finally:
        kube.run(kube.core.delete_namespace(namespace))
        wait_for(
            f"pods and claims of {namespace} gone",
            lambda: not kube.run(kube.core.list_namespaced_pod(namespace)).items and not claims(kube, namespace),
            timeout_s=60,
        )


class TaintRules:
    """DeviceTaintRules a test makes, in the version the API server serves (v1 from 1.37, v1beta2 in 1.36);
    all deleted afterwards."""

    def __init__(self, kube: KubeSession) -> None:
        self.kube, self.custom, self.made = kube, CustomObjectsApi(kube.api), []
        self.version = "v1"
        try:
            kube.run(self.custom.list_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules"))
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.version = "v1beta2"

    def create(self, name: str, pool: str, device: str) -> None:
        body = {
            "apiVersion": f"resource.k8s.io/{self.version}",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": pool, "device": device},
                "taint": {"key": "e2e.paralleljob.dev/broken", "effect": "NoExecute"},
            },
        }
        rules = ("resource.k8s.io", self.version, "devicetaintrules")
        self.kube.run(self.custom.create_cluster_custom_object(*rules, body))
        self.made.append(name)

    def delete_all(self) -> None:
        for name in self.made:
            self.kube.run(
                self.custom.delete_cluster_custom_object("resource.k8s.io", self.version, "devicetaintrules", name)
            )


@pytest.fixture
def taint_rules(dra_real_kube: KubeSession) -> Iterator[TaintRules]:
    rules = TaintRules(dra_real_kube)
    try:
        yield rules
    finally:
        rules.delete_all()


def container_report(cluster: RealCluster, namespace: str, pod: Any) -> dict[str, Any] | None:
    """The worker's printed line, read from the log its node's kubelet wrote for this very pod (by UID)."""
    pattern = f"*/pod-logs/{namespace}_{pod.metadata.name}_{pod.metadata.uid}/trainer/*.log"
    for path in sorted((cluster.cluster.run_dir / "nodes").glob(pattern)):
        for line in Path(path).read_text(errors="replace").splitlines():
            content = line.split(" ", 3)[-1]  # CRI log lines: <time> <stream> <tag> <content>
            if content.startswith("{"):
                return dict(json.loads(content))
    return None


def reports(jobs: Jobs, cluster: RealCluster, name: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Pod name -> (the live pod, what its container saw), once every live pod's container has printed."""

    def ready() -> dict[str, tuple[Any, dict[str, Any]]] | None:
        found = {}
        for pod in jobs.live_pods(name):
            seen = container_report(cluster, jobs.namespace, pod)
            if seen is None:
                return None
            found[pod.metadata.name] = (pod, seen)
        return found or None

    return dict(wait_for(f"every worker of {name} reporting its devices", ready, timeout_s=120, interval=0.5))


def assert_containers_see_their_claims(jobs: Jobs, kube: KubeSession, cluster: RealCluster, name: str) -> dict:
    """Each container sees exactly its claim's devices, which are the pod's annotation's and the recorded
    placement's; no device is seen by two containers. Returns pod name -> what its container saw."""
    status = assert_claims_match_placement(jobs, kube, name)
    record = {p["name"]: p for p in status["placement"]["pods"]}
    by_claim = claims(kube, jobs.namespace)
    seen_by: dict[tuple[str, str], str] = {}
    views = reports(jobs, cluster, name)
    assert sorted(views) == sorted(record)
    for pod_name, (pod, seen) in views.items():
        slot, node = record[pod_name], pod.spec.node_name
        indices = slot["gpuIndices"]
        devices = [device for _, device in claim_devices(by_claim[f"{pod_name}-gpus"])]
        assert devices == [f"gpu-{i}" for i in indices]
        assert pod.metadata.annotations[GPU_INDICES] == ",".join(map(str, indices))
        where = f"{pod_name} on {node} (claim {devices}, annotation {indices}) saw {seen}"
        assert seen["visible"] == ",".join(map(str, indices)), where
        assert seen["devices"] == ",".join(devices), where
        assert seen["uuids"] == {f"PARALLELJOB_FAKE_GPU_{i}_UUID": device_uuid(node, i) for i in indices}, where
        assert seen["listing"] == "".join(f"{i} gpu-{i} {device_uuid(node, i)}\n" for i in indices), where
        for device in devices:
            other = seen_by.setdefault((node, device), pod_name)
            assert other == pod_name, f"{node}/{device} seen by {other} and {pod_name}"
    return {pod_name: seen for pod_name, (_, seen) in views.items()}


def test_every_container_sees_exactly_its_claims_devices_and_a_tainted_one_is_replaced(
    dra_real: RealCluster, dra_real_pjs: Jobs, taint_rules: TaintRules
) -> None:
    jobs, kube = dra_real_pjs, dra_real_pjs.kube
    template = worker_template(dra_real.worker_image)
    template["spec"]["containers"][0]["command"] = ["python3", "-c", REPORT]
    template["spec"]["terminationGracePeriodSeconds"] = 1  # python as PID 1 ignores SIGTERM
    started = time.monotonic()
    jobs.create("visible", 2, 2, 2, template=template, failurePolicy={"strategy": "minimal"})
    before = jobs.wait_phase("visible", "Running", timeout_s=120)
    first = assert_containers_see_their_claims(jobs, kube, dra_real, "visible")
    print(f"TP2xPP2xDP2 on two real DRA nodes, every container reporting: {time.monotonic() - started:.1f} s")
    assert {p["node"] for p in before["placement"]["pods"]} == {"real-node-0", "real-node-1"}
    for pod_name, seen in sorted(first.items()):
        print(f"  {pod_name}: NVIDIA_VISIBLE_DEVICES={seen['visible']} file={seen['listing']!r}")

    victim = before["placement"]["pods"][0]
    node, device = victim["node"], f"gpu-{victim['gpuIndices'][0]}"
    uids = {p.metadata.name: p.metadata.uid for p in jobs.live_pods("visible")}
    tainted_at = time.monotonic()
    taint_rules.create("e2e-real-noexecute", node, device)
    after = jobs.wait_phase("visible", "Running", timeout_s=120, restarts=1)
    assert after["lastFailure"]["kind"] == "GPUFailure" and after["lastFailure"]["pods"] == [victim["name"]]
    wait_for(
        "the victim's replacement pod",
        lambda: any(
            p.metadata.name == victim["name"] and p.metadata.uid != uids[victim["name"]]
            for p in jobs.live_pods("visible")
        ),
        timeout_s=60,
    )
    second = assert_containers_see_their_claims(jobs, kube, dra_real, "visible")
    print(f"taint to the replacement's container reporting: {time.monotonic() - tainted_at:.1f} s")
    moved = {p["name"]: p for p in after["placement"]["pods"]}[victim["name"]]
    assert (node, device) not in {(moved["node"], f"gpu-{i}") for i in moved["gpuIndices"]}, moved
    replacement = second[victim["name"]]  # checked above against its new claim; never the tainted device
    assert (node, device) not in {(moved["node"], d) for d in replacement["devices"].split(",")}, replacement
    print(f"  replacement {victim['name']} on {moved['node']}: NVIDIA_VISIBLE_DEVICES={replacement['visible']}")
    now = {p.metadata.name: p.metadata.uid for p in jobs.live_pods("visible")}
    assert [n for n in now if now[n] != uids[n]] == [victim["name"]]  # minimal: only the victim moved

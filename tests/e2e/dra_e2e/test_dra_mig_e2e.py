"""MIG slices end to end on the DRA dev cluster (issue 44): a kwok node set up for MIG joins the cluster,
publishing its GPUs in NVIDIA's partitionable shape (``devcluster/migslices.py``), and the operator runs jobs
of ``spec.gpuSharing.migProfile`` there.

- Two slice jobs land on one GPU's slices (packed), each pod's claim allocated with exactly its recorded MIG
  device (class ``mig.nvidia.com``), no device in two claims.
- A whole-GPU job that may only use that node is not given the sliced GPU: eight GPUs wait, saying which GPU
  slices hold; seven run on the other seven.
- ``paralleljob status``, ``describe``, the web view and the gauges show the slice jobs and agree
  (``tests/e2e/surfaces.py``).
- A NoExecute DeviceTaintRule on the sliced GPU fails its slices through each job's policy: ``maxRestarts: 0``
  fails, the default moves its slice to another GPU, with a new claim.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drahelpers import RESOURCE, assert_no_device_in_two_claims, claim_devices, claims, custom, taint_gpu
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, wait_for
from tests.e2e.surfaces import check_surfaces, paralleljob_cli

from paralleljob.core.slices.mig import GPU_80GB
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.migslices import mig_device_name
from paralleljob.devcluster.nodes import NodeShape, create_gpu_nodes
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools.operatorproc import OperatorProcess

pytestmark = pytest.mark.e2e

MIG_SHAPE = NodeShape(count=1, gpu_api="dra", mig_nodes=1, name_prefix="mig-node")
ONE = GPU_80GB.profile("1g.10gb")


def slice_job(pjs: Jobs, name: str, **spec: Any) -> None:
    pjs.create(name, 1, 1, 1, gpuSharing={"migProfile": ONE.name}, **spec)


def pinned(node: str) -> dict[str, Any]:
    """A template that may only run on ``node`` (so a whole-GPU job has no other GPUs to go to)."""
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{"name": "trainer", "image": "t:e2e"}]}
    return {"spec": spec}


@pytest.fixture
def mig_node(dra_kube: KubeSession) -> Iterator[str]:
    """One more kwok node, set up for MIG, for this test only; deleted with its ResourceSlices afterwards."""
    name = MIG_SHAPE.node_name(0)
    dra_kube.run(create_gpu_nodes(dra_kube.api, MIG_SHAPE))
    dra_kube.wait_node_ready(name)
    try:
        yield name
    finally:
        dra_kube.run(dra_kube.core.delete_node(name))
        listed = dra_kube.run(custom(dra_kube).list_cluster_custom_object(*RESOURCE, "resourceslices"))
        for item in listed["items"]:  # kube-controller-manager's garbage collector would, in its own time
            if item["spec"].get("nodeName") == name:
                try:
                    dra_kube.run(
                        custom(dra_kube).delete_cluster_custom_object(
                            *RESOURCE, "resourceslices", item["metadata"]["name"]
                        )
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        raise


def only_pod(pjs: Jobs, name: str) -> dict[str, Any]:
    (pod,) = pjs.status(name)["placement"]["pods"]
    return dict(pod)


def assert_claim_is_the_slice(pjs: Jobs, kube: KubeSession, name: str) -> str:
    """The job's one pod references its claim, allocated with exactly the recorded MIG device, for it."""
    slot = only_pod(pjs, name)
    device = mig_device_name(slot["gpuIndices"][0], ONE, slot["migSlice"]["start"])
    (pod,) = pjs.live_pods(name)
    assert pod.spec.node_name == slot["node"]
    assert pod.metadata.annotations["paralleljob.dev/mig-slice"] == f"{ONE.name}@{slot['migSlice']['start']}"
    assert "nvidia.com/gpu" not in (pod.spec.containers[0].resources.limits or {})
    (reference,) = pod.spec.resource_claims
    claim = claims(kube, pjs.namespace)[reference.resource_claim_name]
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert claim_devices(claim) == [(slot["node"], device)]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod.metadata.uid]
    return device


def test_slices_share_a_gpu_whole_jobs_avoid_it_and_a_gpu_failure_fails_them_by_policy(
    dra_pjs: Jobs,
    dra_kube: KubeSession,
    dra_cluster: DevCluster,
    dra_operator: OperatorProcess,
    mig_node: str,
    taint_rules: list[str],
    tmp_path: Path,
) -> None:
    slice_job(dra_pjs, "fragile", failurePolicy={"maxRestarts": 0})
    dra_pjs.wait_phase("fragile", "Running", timeout_s=60)
    slice_job(dra_pjs, "sturdy")
    dra_pjs.wait_phase("sturdy", "Running", timeout_s=60)
    fragile, sturdy = only_pod(dra_pjs, "fragile"), only_pod(dra_pjs, "sturdy")
    assert fragile["node"] == sturdy["node"] == mig_node
    assert fragile["gpuIndices"] == sturdy["gpuIndices"], "packed onto the GPU the first slice is on"
    assert fragile["migSlice"]["start"] != sturdy["migSlice"]["start"]
    gpu = fragile["gpuIndices"][0]
    devices = {assert_claim_is_the_slice(dra_pjs, dra_kube, name) for name in ("fragile", "sturdy")}
    assert len(devices) == 2
    assert_no_device_in_two_claims(dra_kube)

    # a whole-GPU job that may only use this node never gets the sliced GPU
    dra_pjs.create("eight", 8, 1, 1, template=pinned(mig_node))
    waiting = wait_for(
        "eight waiting, told about the sliced GPU",
        lambda: (s := dra_pjs.status("eight")).get("phase") == "Queued" and "MIG slices" in s.get("message", "") and s,
        timeout_s=60,
    )
    assert f"{mig_node} GPU {gpu}" in waiting["message"], waiting["message"]
    dra_pjs.delete("eight")
    dra_pjs.create("seven", 7, 1, 1, template=pinned(mig_node))
    dra_pjs.wait_phase("seven", "Running", timeout_s=60)
    (seven,) = dra_pjs.status("seven")["placement"]["pods"]
    assert gpu not in seven["gpuIndices"] and len(seven["gpuIndices"]) == 7

    # every surface shows them and agrees on the GPUs
    surfaces = check_surfaces(
        dra_cluster.kubeconfig, dra_operator, dra_pjs.namespace, ["fragile", "sturdy", "seven"], tmp_path
    )
    (row,) = [r for r in surfaces.status["nodes"] if r["name"] == mig_node]
    cell = row["gpus"][gpu]
    assert cell["state"] == "used" and len(cell["slices"]) == 2
    assert all(f"{dra_pjs.namespace}/" in text and ONE.name in text for text in cell["slices"])
    described = surfaces.described[f"{dra_pjs.namespace}/sturdy"]
    assert described["mig_profile"] == ONE.name
    assert described["pods"][0]["mig"] == f"{ONE.name}@{sturdy['migSlice']['start']}"
    row_wide = next(line for line in surfaces.kubectl_wide.splitlines() if line.split()[:1] == ["sturdy"])
    assert ONE.name in row_wide.split(), f"kubectl get pj -o wide shows the MIG profile:\n{surfaces.kubectl_wide}"
    shown = surfaces.snapshot["nodes"][mig_node]["notes"]
    assert any(note.startswith(f"{gpu}: MIG ") and "/sturdy" in note for note in shown), shown
    panel = surfaces.panels[f"{dra_pjs.namespace}/sturdy"]
    assert json.dumps(panel).count(f"{ONE.name}@") >= 1, "the web view's panel names the slice"
    assert "MIG" in paralleljob_cli(dra_cluster.kubeconfig, "describe", f"{dra_pjs.namespace}/sturdy")

    # the sliced GPU fails: each slice job by its own policy
    dra_pjs.delete("seven")
    # its GPUs free again first, so the slice that moves finds room at once (else it is requeued, then placed)
    wait_for(
        "seven's pods and claims gone",
        lambda: not dra_pjs.pods("seven") and len(claims(dra_kube, dra_pjs.namespace)) == 2,
        60,
    )
    taint_gpu(dra_kube, taint_rules, f"e2e-mig-{dra_pjs.namespace}"[:63], mig_node, gpu)
    failed = dra_pjs.wait_phase("fragile", "Failed", timeout_s=90)
    assert failed["lastFailure"]["kind"] == "GPUFailure" and failed["lastFailure"]["action"] == "failed"
    moved = dra_pjs.wait_phase("sturdy", "Running", timeout_s=90, restarts=1)
    assert moved["lastFailure"]["action"] == "rescheduled"
    (slot,) = moved["placement"]["pods"]
    assert slot["node"] == mig_node and slot["gpuIndices"] != [gpu]
    wait_for("sturdy's new pod bound", lambda: [p for p in dra_pjs.live_pods("sturdy") if p.spec.node_name], 60)
    wait_for(
        "sturdy's claim on its new slice",
        lambda: _claimed(dra_pjs, dra_kube, "sturdy"),
        timeout_s=60,
    )
    assert_no_device_in_two_claims(dra_kube)


def _claimed(pjs: Jobs, kube: KubeSession, name: str) -> bool:
    try:
        assert_claim_is_the_slice(pjs, kube, name)
    except (AssertionError, KeyError, ValueError):
        return False
    return True

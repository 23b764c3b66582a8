"""MPS shares end to end on the DRA dev cluster (issue 44 item 2): jobs of ``spec.gpuSharing.mps`` on kwok DRA
nodes, each rank an MPS client of one GPU through the GPU's shared ResourceClaim.

- Two 25% jobs of one namespace share one GPU and one claim: allocated with exactly that GPU, the NVIDIA
  driver's MPS config (thread percentage 25, a quarter of the memory) copied into the allocation, reserved for
  both pods; a 25% job of another namespace gets another GPU and a claim of its own namespace.
- A whole-GPU job that may only use that node never gets those GPUs: eight GPUs wait, saying which GPUs MPS
  shares hold; six run on the other six.
- A NoExecute DeviceTaintRule on the shared GPU fails both jobs on it by their own policies (``maxRestarts: 0``
  fails, the default moves to another GPU with a new claim), and the old claim, used by no record and no
  running pod any more, is deleted. The gauges count the MPS GPUs and shares.
- The jobs are deleted while the operator is stopped: started again, it deletes their claims from what it
  reads alone (no record names them, no running pod is reserved for them).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from drahelpers import assert_no_device_in_two_claims, claim_devices, claims, taint_gpu
from pjhelpers import Jobs, jobs_in, wait_for
from tests.e2e.surfaces import paralleljob_cli

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools.operatorproc import OperatorProcess

pytestmark = pytest.mark.e2e

MPS_LABEL = "paralleljob.dev/mps-share"


def share_job(pjs: Jobs, name: str, percent: int = 25, **spec: Any) -> None:
    pjs.create(name, 1, 1, 1, gpuSharing={"mps": {"percent": percent}}, **spec)


def pinned(node: str) -> dict[str, Any]:
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{"name": "trainer", "image": "t:e2e"}]}
    return {"spec": spec}


def where(pjs: Jobs, name: str) -> tuple[str, int]:
    (pod,) = pjs.status(name)["placement"]["pods"]
    assert pod["mpsShare"] == {"percent": 25}
    return pod["node"], pod["gpuIndices"][0]


def mps_claims(kube: KubeSession, namespace: str) -> dict[str, dict[str, Any]]:
    return {name: c for name, c in claims(kube, namespace).items() if MPS_LABEL in c["metadata"].get("labels", {})}


def shared_claim(pjs: Jobs, kube: KubeSession, names: list[str]) -> dict[str, Any]:
    """The one claim the jobs' pods reference, allocated to their GPU with the MPS config, reserved for them."""
    node, gpu = where(pjs, names[0])
    pods = [pod for name in names for pod in pjs.live_pods(name)]
    referenced = {ref.resource_claim_name for pod in pods for ref in pod.spec.resource_claims}
    assert len(referenced) == 1, referenced
    claim = claims(kube, pjs.namespace)[referenced.pop()]
    assert claim_devices(claim) == [(node, f"gpu-{gpu}")]
    (config,) = claim["spec"]["devices"]["config"]
    mps = config["opaque"]["parameters"]["sharing"]
    assert mps["strategy"] == "MPS" and mps["mpsConfig"]["defaultActiveThreadPercentage"] == 25
    assert mps["mpsConfig"]["defaultPinnedDeviceMemoryLimit"].endswith("Mi")
    (copied,) = claim["status"]["allocation"]["devices"]["config"]
    assert copied["source"] == "FromClaim" and copied["opaque"] == config["opaque"]
    assert sorted(r["uid"] for r in claim["status"]["reservedFor"]) == sorted(p.metadata.uid for p in pods)
    for pod in pods:
        assert pod.spec.node_name == node and "nvidia.com/gpu" not in (pod.spec.containers[0].resources.limits or {})
    return dict(claim)


@pytest.fixture
def other_pjs(dra_kube: KubeSession, dra_operator: OperatorProcess) -> Iterator[Jobs]:
    """ParallelJobs in a second namespace of this test's, deleted with its claims afterwards."""
    name = f"dra-mps-other-{secrets.token_hex(3)}"
    dra_kube.run(
        dra_kube.core.create_namespace({"metadata": {"name": name, "labels": {"paralleljob.dev/e2e": "true"}}})
    )
    try:
        with jobs_in(dra_kube, name, dra_operator, check_view=False) as jobs:
            yield jobs
    finally:
        dra_kube.run(dra_kube.core.delete_namespace(name))
        wait_for(f"claims of {name} gone", lambda: not claims(dra_kube, name), timeout_s=60)


def test_shares_pack_by_namespace_whole_jobs_avoid_them_and_a_gpu_failure_repairs_them(
    dra_pjs: Jobs,
    other_pjs: Jobs,
    dra_kube: KubeSession,
    dra_cluster: DevCluster,
    dra_operator: OperatorProcess,
    taint_rules: list[str],
) -> None:
    share_job(dra_pjs, "fragile", failurePolicy={"maxRestarts": 0})
    dra_pjs.wait_phase("fragile", "Running", timeout_s=120)
    share_job(dra_pjs, "sturdy")
    share_job(other_pjs, "other")
    dra_pjs.wait_phase("sturdy", "Running", timeout_s=120)
    other_pjs.wait_phase("other", "Running", timeout_s=120)
    node, gpu = where(dra_pjs, "fragile")
    assert where(dra_pjs, "sturdy") == (node, gpu), "packed onto the GPU the first share is on"
    assert where(other_pjs, "other")[0] == node, "another namespace: a free GPU of the node already in use"
    assert where(other_pjs, "other")[1] != gpu, "another namespace: another claim, so another GPU"
    first = wait_for("one claim for both jobs", lambda: _quiet(shared_claim, dra_pjs, dra_kube, ["fragile", "sturdy"]))
    assert list(mps_claims(dra_kube, dra_pjs.namespace)) == [first["metadata"]["name"]]
    wait_for("the other namespace's claim", lambda: _quiet(shared_claim, other_pjs, dra_kube, ["other"]))
    assert_no_device_in_two_claims(dra_kube)
    assert "MPS" in paralleljob_cli(dra_cluster.kubeconfig, "describe", f"{dra_pjs.namespace}/sturdy")

    # a whole-GPU job that may only use this node never gets a GPU MPS shares hold
    held = sorted({gpu, where(other_pjs, "other")[1]})
    dra_pjs.create("eight", 8, 1, 1, template=pinned(node))
    waiting = wait_for(
        "eight waiting, told about the MPS GPUs",
        lambda: (s := dra_pjs.status("eight")).get("phase") == "Queued" and "MPS shares" in s.get("message", "") and s,
        timeout_s=90,
    )
    assert f"{node} GPU {','.join(map(str, held))}" in waiting["message"], waiting["message"]
    dra_pjs.delete("eight")
    dra_pjs.create("six", 6, 1, 1, template=pinned(node))
    dra_pjs.wait_phase("six", "Running", timeout_s=120)
    (six,) = dra_pjs.status("six")["placement"]["pods"]
    assert not set(held) & set(six["gpuIndices"])
    dra_pjs.delete("six")
    wait_for("six's pods gone", lambda: not dra_pjs.pods("six"), 90)

    # the shared GPU breaks: each job on it by its own policy; the old claim goes once nothing uses it
    taint_gpu(dra_kube, taint_rules, f"e2e-mps-{dra_pjs.namespace}"[:63], node, gpu)
    failed = dra_pjs.wait_phase("fragile", "Failed", timeout_s=120)
    assert failed["lastFailure"]["kind"] == "GPUFailure" and failed["lastFailure"]["action"] == "failed"
    moved = dra_pjs.wait_phase("sturdy", "Running", timeout_s=120, restarts=1)
    assert moved["lastFailure"]["action"] == "rescheduled"
    assert where(dra_pjs, "sturdy") != (node, gpu)
    second = wait_for("sturdy's claim on its new GPU", lambda: _quiet(shared_claim, dra_pjs, dra_kube, ["sturdy"]))
    assert second["metadata"]["name"] != first["metadata"]["name"]
    wait_for(
        "the broken GPU's claim deleted",
        lambda: list(mps_claims(dra_kube, dra_pjs.namespace)) == [second["metadata"]["name"]],
        timeout_s=90,
    )
    assert_no_device_in_two_claims(dra_kube)

    def gauges() -> str | None:
        text = dra_operator.metrics()
        return (
            text if "paralleljob_mps_gpus 2.0" in text and 'paralleljob_mps_shares{percent="25"} 2.0' in text else None
        )

    wait_for("the MPS gauges: two GPUs, two 25% shares", gauges, 30)

    # the jobs go while the operator is down: started again, it deletes their claims all the same
    dra_operator.stop()
    for pjs, name in ((dra_pjs, "sturdy"), (dra_pjs, "fragile"), (other_pjs, "other")):
        pjs.delete(name)
    dra_operator.start()
    for pjs in (dra_pjs, other_pjs):
        wait_for(f"MPS claims of {pjs.namespace} deleted", lambda p=pjs: not mps_claims(dra_kube, p.namespace), 120)


def _quiet(check: Any, *args: Any) -> Any:
    """``check(*args)``, or None while what it reads is not there yet."""
    try:
        return check(*args)
    except (AssertionError, KeyError, ValueError, TypeError):
        return None

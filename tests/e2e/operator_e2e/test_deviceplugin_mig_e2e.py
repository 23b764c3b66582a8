"""MIG slices end to end on the device-plugin dev cluster (issue 44): two kwok nodes set up as the GPU Operator's
mig-manager leaves a node with ``all-1g.10gb`` under the mixed strategy (``dev-cluster up --mig-nodes``: no
``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb: 56``, the ``nvidia.com/mig.*`` labels) join the session's cluster,
and the operator runs jobs of ``spec.gpuSharing.migProfile`` there.

- Slice jobs land on one MIG node (packed), each pod asking for ``nvidia.com/mig-1g.10gb: 1`` and no
  ``nvidia.com/gpu``, its record naming node and profile (the device plugin picks the GPU).
- A whole-GPU gang of two full nodes runs on whole nodes meanwhile, never on a MIG node.
- ``paralleljob status``, ``describe``, the web view and the gauges show the slices and agree.
- A GPU reported unhealthy on the sliced node fails every slice job there through its own policy
  (``maxRestarts: 0`` fails; the default moves to the other MIG node, its new pod asking for the profile).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pjhelpers import Jobs, wait_for
from tests.e2e.surfaces import check_surfaces, gpu_metrics

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.nodes import NodeShape, create_gpu_nodes
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools.operatorproc import OperatorProcess

pytestmark = pytest.mark.e2e

MIG_SHAPE = NodeShape(count=2, mig_nodes=2, name_prefix="dpmig-node")
ONE = "1g.10gb"
RESOURCE = f"nvidia.com/mig-{ONE}"


@pytest.fixture
def mig_nodes(kube: KubeSession) -> Iterator[list[str]]:
    """Two more kwok nodes set up for MIG (mixed strategy), for this test only; deleted afterwards."""
    names = MIG_SHAPE.names()
    kube.run(create_gpu_nodes(kube.api, MIG_SHAPE))
    for name in names:
        kube.wait_node_ready(name)
    try:
        yield names
    finally:
        for name in names:
            kube.run(kube.core.delete_node(name))


def slice_job(pjs: Jobs, name: str, dp: int = 1, **spec: Any) -> None:
    pjs.create(name, 1, 1, dp, gpuSharing={"migProfile": ONE}, **spec)


def slots(pjs: Jobs, name: str) -> list[dict[str, Any]]:
    return list(pjs.status(name)["placement"]["pods"])


def assert_pods_ask_for_the_slice(pjs: Jobs, name: str) -> set[str]:
    """Every live pod of the job is bound where its record says, asking for one 1g.10gb slice and no GPU."""
    recorded = {s["name"]: s for s in slots(pjs, name)}
    pods = pjs.live_pods(name)
    assert sorted(p.metadata.name for p in pods) == sorted(recorded)
    for pod in pods:
        slot = recorded[pod.metadata.name]
        assert slot["gpuIndices"] == [] and slot["migSlice"] == {"profile": ONE}, slot
        assert pod.spec.node_name == slot["node"]
        limits = pod.spec.containers[0].resources.limits or {}
        assert limits.get(RESOURCE) == "1" and "nvidia.com/gpu" not in limits, limits
    return {s["node"] for s in recorded.values()}


def _bound(pjs: Jobs, name: str) -> bool:
    pods = pjs.live_pods(name)
    return len(pods) == len(slots(pjs, name)) and all(p.spec.node_name for p in pods)


def test_slices_pack_on_a_mig_node_whole_gangs_keep_whole_nodes_and_a_gpu_failure_fails_them_by_policy(
    mig_nodes: list[str],  # first: its nodes go only once the jobs' cleanup has settled
    pjs: Jobs,
    kube: KubeSession,
    dev_cluster: DevCluster,
    pj_operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    slice_job(pjs, "fragile", failurePolicy={"maxRestarts": 0})
    pjs.wait_phase("fragile", "Running", timeout_s=60)
    slice_job(pjs, "sturdy", dp=3)
    pjs.wait_phase("sturdy", "Running", timeout_s=60)
    wait_for("the slice pods bound", lambda: _bound(pjs, "fragile") and _bound(pjs, "sturdy"), 60)
    (home,) = assert_pods_ask_for_the_slice(pjs, "fragile")
    assert home in mig_nodes
    assert assert_pods_ask_for_the_slice(pjs, "sturdy") == {home}, "packed onto the MIG node already sliced"
    other = next(n for n in mig_nodes if n != home)

    # a gang of two whole nodes runs on whole nodes, none of them a MIG node
    pjs.create("big", 8, 1, 2)
    pjs.wait_phase("big", "Running", timeout_s=90)
    big = slots(pjs, "big")
    assert all(len(s["gpuIndices"]) == 8 for s in big) and not {s["node"] for s in big} & set(mig_nodes)

    # every surface shows them and agrees on the GPUs
    surfaces = check_surfaces(
        dev_cluster.kubeconfig, pj_operator, pjs.namespace, ["fragile", "sturdy", "big"], tmp_path
    )
    rows = {row["name"]: row for row in surfaces.status["pools"]}
    assert rows[home]["held"] == {ONE: 4} and rows[home]["offered"] == {ONE: 56} and rows[other]["held"] == {}
    assert f"{pjs.namespace}/sturdy {ONE} x3" in rows[home]["slices"]
    assert not {r["name"] for r in surfaces.status["nodes"]} & set(mig_nodes), "no MIG GPU is offered whole"
    assert {p["name"] for p in surfaces.snapshot["migPools"]} == set(mig_nodes)
    assert [p["mig"] for p in surfaces.described[f"{pjs.namespace}/sturdy"]["pods"]] == [ONE] * 3
    assert json.dumps(surfaces.panels[f"{pjs.namespace}/sturdy"]).count(ONE) >= 1
    want = (f'paralleljob_mig_slices{{profile="{ONE}"}} 4.0', "paralleljob_sliced_gpus 8.0")  # 8: the node's MIG GPUs

    def gauges() -> str | None:
        text = pj_operator.metrics()
        return text if all(w in text for w in want) else None

    metrics = wait_for("the slice gauges", gauges, 30)
    assert gpu_metrics(metrics)["allocated"] == 16

    # a GPU of the sliced node fails: every slice job there, each by its own policy
    kube.run(kube.core.patch_node(home, {"metadata": {"annotations": {"paralleljob.dev/unhealthy-gpus": "3"}}}))
    failed = pjs.wait_phase("fragile", "Failed", timeout_s=90)
    assert failed["lastFailure"]["kind"] == "GPUFailure" and failed["lastFailure"]["action"] == "failed"
    moved = pjs.wait_phase("sturdy", "Running", timeout_s=90, restarts=1)
    assert moved["lastFailure"]["action"] == "rescheduled"
    assert "cannot tell which slices" in moved["lastFailure"]["message"]
    assert {s["node"] for s in moved["placement"]["pods"]} == {other}
    wait_for("sturdy's new pods bound on the other MIG node", lambda: _bound(pjs, "sturdy"), 60)
    assert assert_pods_ask_for_the_slice(pjs, "sturdy") == {other}
    assert pjs.status("big")["phase"] == "Running" and pjs.status("big").get("restarts", 0) == 0


def test_a_pod_group_asking_for_slices_is_refused_naming_why_and_elastic_slice_jobs_are_refused_by_the_api(
    mig_nodes: list[str], pjs: Jobs, kube: KubeSession
) -> None:
    """An Indexed Job of 2 pods, each asking one 1g.10gb slice: the operator adopts the group and holds it
    with the reason (pod groups on slices are not built), binding nothing; elastic jobs asking for a slice or
    a share are refused by the CRD's CEL rule with the operator's words."""
    from kubernetes_asyncio.client import BatchV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from paralleljob.k8s.edge.constants import PARALLELISM_ANNOTATION, POD_GROUP_LABEL, SCHEDULER_NAME
    from paralleljob.k8s.edge.parse.specs import SHARING_MESSAGES

    batch: Any = BatchV1Api(kube.api)
    ns, group = pjs.namespace, "evals"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": group},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {
                "metadata": {"labels": {POD_GROUP_LABEL: group}, "annotations": {PARALLELISM_ANNOTATION: "1x1x2"}},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "restartPolicy": "Never",
                    "containers": [{"name": "eval", "image": "x", "resources": {"limits": {RESOURCE: "1"}}}],
                },
            },
        },
    }
    kube.run(batch.create_namespaced_job(ns, job))
    try:

        def refused() -> dict[str, Any] | None:
            try:
                status = pjs.status(group)
            except Exception:
                return None
            ready: dict[str, Any] = next(
                (c for c in status.get("conditions") or [] if c["type"] == "PodGroupReady"), {}
            )
            return ready if ready.get("reason") == "MIGSlicesNotSupported" else None

        ready = wait_for("the slice group refused with its reason", refused, 60)
        assert RESOURCE in ready["message"] and "spec.gpuSharing.migProfile" in ready["message"], ready
        assert pjs.status(group)["phase"] == "Queued"
        pjs.wait_events(group, {"MIGSlicesNotSupported"})
        listed = kube.run(kube.core.list_namespaced_pod(ns, label_selector=f"{POD_GROUP_LABEL}={group}"))
        assert len(listed.items) == 2 and not any(p.spec.node_name for p in listed.items), "nothing bound"
    finally:
        kube.run(batch.delete_namespaced_job(group, ns, propagation_policy="Background"))

    for sharing in ({"migProfile": ONE}, {"mps": {"percent": 25}}):
        body = Jobs.manifest("elastic-slices", 1, 1, 2)
        body["spec"]["parallelism"].update(minData=1, maxData=2)
        body["spec"]["gpuSharing"] = sharing
        with pytest.raises(ApiException) as no:
            pjs.create_raw(body)
        assert no.value.status == 422 and SHARING_MESSAGES["sized"] in str(no.value.body), no.value.body

"""DRA discovery end to end (issue 13, parts 1 and 5): a dev cluster whose GPUs exist only as ResourceSlices
of ``gpu.nvidia.com`` on a real kube-apiserver 1.36, and the operator placing jobs on them.

The nodes here have no ``nvidia.com/gpu`` allocatable and no GFD GPU labels, so any placement at all is
made on slice-derived GPUs; the tests also pin that the GPU indices are the device numbers and that
devices allocated in someone else's ResourceClaim are not given out again.
"""

from __future__ import annotations

from typing import Any

import drahelpers
import pytest
from pjhelpers import Jobs, OperatorProcess, assert_no_gpu_used_twice, wait_for

from paralleljob.devcluster import dra
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


def _slices(kube: KubeSession) -> dict[str, dict[str, Any]]:
    listed = kube.run(drahelpers.custom(kube).list_cluster_custom_object(*drahelpers.RESOURCE, "resourceslices"))
    return {item["spec"]["nodeName"]: item for item in listed["items"]}


def test_dra_cluster_publishes_nvidia_shaped_slices_and_a_device_class(
    dra_cluster: DevCluster, dra_kube: KubeSession
) -> None:
    slices = _slices(dra_kube)
    assert sorted(slices) == list(dra_cluster.nodes)
    for node_name, item in slices.items():
        spec = item["spec"]
        assert spec["driver"] == "gpu.nvidia.com" and spec["pool"]["name"] == node_name
        assert item["metadata"]["ownerReferences"][0]["kind"] == "Node"
        devices = spec["devices"]
        assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
        for device in devices:
            attributes = device["attributes"]
            assert attributes["type"] == {"string": "gpu"}
            assert attributes["uuid"]["string"].startswith("GPU-")
            assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
            assert attributes["architecture"] == {"string": "Hopper"}
            assert "index" not in attributes
            assert device["capacity"]["memory"]["value"] == "81559Mi"
        roots = [d["attributes"][dra.PCIE_ROOT_ATTRIBUTE]["string"] for d in devices]
        assert roots == ["pci0000:00"] * 4 + ["pci0000:80"] * 4
        assert len({d["attributes"][dra.PCI_BUS_ID_ATTRIBUTE]["string"] for d in devices}) == 8
    custom = drahelpers.custom(dra_kube)
    device_class = dra_kube.run(
        custom.get_cluster_custom_object(*drahelpers.RESOURCE, "deviceclasses", "gpu.nvidia.com")
    )
    assert "gpu.nvidia.com" in device_class["spec"]["selectors"][0]["cel"]["expression"]
    nodes = dra_kube.run(dra_kube.core.list_node()).items
    assert nodes and all("nvidia.com/gpu" not in (n.status.allocatable or {}) for n in nodes)
    # DeviceTaintRule is served (resource.k8s.io/v1beta2 turned on for device taints).
    rules = dra_kube.run(
        drahelpers.custom(dra_kube).list_cluster_custom_object("resource.k8s.io", "v1beta2", "devicetaintrules")
    )
    assert rules["items"] == []


def test_operator_places_a_job_on_gpus_it_reads_from_slices(dra_pjs: Jobs, dra_kube: KubeSession) -> None:
    dra_pjs.create("slices", tp=8, pp=1, dp=2, gpuProduct="NVIDIA-H100-80GB-HBM3")
    status = dra_pjs.wait_phase("slices", "Running", timeout_s=60)
    drahelpers.assert_claims_match_placement(dra_pjs, dra_kube, "slices")
    assert_no_gpu_used_twice(dra_kube)
    pods = status["placement"]["pods"]
    assert len({p["node"] for p in pods}) == 2
    assert all(p["gpuIndices"] == list(range(8)) for p in pods)


def test_devices_allocated_in_other_claims_count_as_used(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, dra_namespace: str
) -> None:
    busy, free = dra_cluster.nodes[:3], dra_cluster.nodes[3]
    for node_name in busy:
        drahelpers.hold_devices(dra_kube, dra_namespace, f"held-{node_name}", node_name, ["gpu-0", "gpu-5"])
    # Eight GPUs in one node: only the node nobody's claim touches has them.
    dra_pjs.create("whole", tp=8, pp=1, dp=1)
    whole = dra_pjs.wait_phase("whole", "Running", timeout_s=60)
    assert [p["node"] for p in whole["placement"]["pods"]] == [free]
    # Six more fit beside each claim; never on the claimed devices.
    dra_pjs.create("beside", tp=2, pp=1, dp=3)
    beside = dra_pjs.wait_phase("beside", "Running", timeout_s=60)
    for pod in beside["placement"]["pods"]:
        assert pod["node"] in busy and not {0, 5} & set(pod["gpuIndices"]), pod
    assert_no_gpu_used_twice(dra_kube)
    # A job that needs a whole node more cannot run until a claim lets go of its devices.
    dra_pjs.create("waits", tp=8, pp=1, dp=1)
    dra_pjs.wait_phase("waits", "Queued", timeout_s=30)
    dra_pjs.delete("beside")
    dra_kube.run(
        drahelpers.custom(dra_kube).delete_namespaced_custom_object(
            *drahelpers.RESOURCE, dra_namespace, "resourceclaims", f"held-{busy[0]}"
        )
    )
    waits = dra_pjs.wait_phase("waits", "Running", timeout_s=60)
    assert [p["node"] for p in waits["placement"]["pods"]] == [busy[0]]


def test_each_worker_gets_a_claim_allocated_with_exactly_its_devices(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_namespace: str
) -> None:
    dra_pjs.create("claimed", tp=4, pp=2, dp=1)
    dra_pjs.wait_phase("claimed", "Running", timeout_s=60)
    drahelpers.assert_claims_match_placement(dra_pjs, dra_kube, "claimed")
    dra_pjs.create("beside", tp=2, pp=1, dp=2)
    dra_pjs.wait_phase("beside", "Running", timeout_s=60)
    drahelpers.assert_claims_match_placement(dra_pjs, dra_kube, "beside")
    # Across both jobs, too: no device is allocated twice.
    devices = [
        (r["pool"], r["device"])
        for c in drahelpers.claims(dra_kube, dra_namespace).values()
        for r in c["status"]["allocation"]["devices"]["results"]
    ]
    assert len(devices) == len(set(devices)) == 12
    # Deleting the job leaves no claim behind: the operator deletes each once its pod is gone.
    dra_pjs.delete("claimed")
    dra_pjs.delete("beside")
    wait_for("the jobs' claims deleted", lambda: not drahelpers.claims(dra_kube, dra_namespace), timeout_s=30)


def test_operator_killed_between_claim_and_bind_resumes_without_leaks(
    dra_pjs: Jobs, dra_operator: OperatorProcess, dra_kube: KubeSession, dra_namespace: str
) -> None:
    dra_operator.stop()
    # The crash hook lets 3 binds land and holds the rest back after their claims are written: the
    # process dies with claims allocated and reserved for pods that are not bound yet.
    dra_operator.start({"PARALLELJOB_CRASH_AFTER_BINDS": "3"})
    dra_pjs.create("resume", tp=2, pp=2, dp=4)  # 8 pods
    assert dra_operator.wait_exit(30) == 17, dra_operator.log_tail()
    half = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in dra_pjs.pods("resume")}
    assert len([n for n, (_, node) in half.items() if node]) == 3
    before = {name: c["metadata"]["uid"] for name, c in drahelpers.claims(dra_kube, dra_namespace).items()}
    allocated = [
        c for c in drahelpers.claims(dra_kube, dra_namespace).values() if (c.get("status") or {}).get("allocation")
    ]
    assert len(allocated) > 3, "claims of unbound pods were allocated before the crash"
    dra_operator.start()
    dra_pjs.wait_phase("resume", "Running", timeout_s=60)
    drahelpers.assert_claims_match_placement(dra_pjs, dra_kube, "resume")
    after = drahelpers.claims(dra_kube, dra_namespace)
    assert len(after) == 8, sorted(after)  # one per worker, nothing leaked
    for name, uid in before.items():
        assert after[name]["metadata"]["uid"] == uid, f"claim {name} was re-created instead of adopted"
    for name, (uid, _) in half.items():
        assert {p.metadata.name: p.metadata.uid for p in dra_pjs.pods("resume")}[name] == uid
    assert_no_gpu_used_twice(dra_kube)

"""Jobs on MPS shares through the operator's pure pass (issue 44 item 2): ``spec.gpuSharing.mps`` places each
rank as one MPS client of a DRA GPU, packed by namespace and percent onto one GPU whose pods reference one
shared ResourceClaim (exact device, the NVIDIA driver's MPS config); whole-GPU jobs and MIG slices kept off
such a GPU; a broken GPU failing every share job on it through each job's policy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from paralleljob.core.admit.queueing import QueuePolicy
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.rankorder import RankOrder
from paralleljob.k8s.edge.parse.specs import SHARING_MESSAGES, parse_request
from paralleljob.k8s.edge.render.mpsclaims import memory_limit_mib, mps_claim_name
from paralleljob.k8s.edge.status.records import MalformedRecord, MpsGrant, PlacementRecord, PodSlot, record_from_status
from paralleljob.k8s.plan.actions import PodCreate
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.migworld import MIG_NODE, dra_node, mig_overlay, mig_pool

CRD = Path(__file__).parents[2] / "crds" / "paralleljob.yaml"


@pytest.fixture
def dra_world() -> Iterator[list[dict[str, Any]]]:
    with mig_overlay() as claims:
        yield claims


def mps_job(name: str, percent: int = 25, dp: int = 1, namespace: str = "ns", **policy: Any) -> dict[str, Any]:
    return paralleljob(
        name, tp=1, pp=1, dp=dp, memory=0, namespace=namespace,
        extra_spec={"gpuSharing": {"mps": {"percent": percent}}}, **policy,
    )  # fmt: skip


def pods_of(cluster: FakeCluster, key: str) -> list[dict[str, Any]]:
    return list(cluster.job(key)["status"]["placement"]["pods"])


def gpu_of(cluster: FakeCluster, key: str) -> tuple[str, int]:
    (pod,) = pods_of(cluster, key)
    return pod["node"], pod["gpuIndices"][0]


def all_creates(cluster: FakeCluster, passes: int) -> list[PodCreate]:
    made = []
    for _ in range(passes):
        plan = cluster.step()
        made += [c for actions in plan.jobs for c in actions.creates]
    return made


# ---- the request ---------------------------------------------------------------------------------------------


def test_gpu_sharing_asks_for_an_mps_share_of_one_gpu_per_rank() -> None:
    body = mps_job("j")["spec"]
    request = parse_request("ns/j", body)
    assert request.mps_percent == 25 and request.mig_profile == ""
    assert request.describe() == "TP1xPP1xDP1 (1 x MPS 25%)"
    for bad in (0, 101, "25", 2.5, True, None):
        body = mps_job("j")["spec"]
        body["gpuSharing"] = {"mps": {"percent": bad}}
        with pytest.raises(InvalidRequest, match=re.escape(SHARING_MESSAGES["percent"])):
            parse_request("ns/j", body)
    for both in ({"migProfile": "1g.10gb", "mps": {"percent": 10}}, {}):
        body = mps_job("j")["spec"]
        body["gpuSharing"] = both
        with pytest.raises(InvalidRequest, match=re.escape(SHARING_MESSAGES["one"])):
            parse_request("ns/j", body)
    body = mps_job("j")["spec"]
    body["parallelism"]["tensor"] = 2
    with pytest.raises(InvalidRequest, match=re.escape(SHARING_MESSAGES["tensor"])):
        parse_request("ns/j", body)


def test_the_crd_refuses_the_same_with_the_same_words() -> None:
    crd = yaml.safe_load(CRD.read_text())
    sharing = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["gpuSharing"]
    assert [r["message"] for r in sharing["x-kubernetes-validations"]] == [SHARING_MESSAGES["one"]]
    assert "required" not in sharing
    percent = sharing["properties"]["mps"]["properties"]["percent"]
    (rule,) = percent["x-kubernetes-validations"]
    assert rule == {"rule": "self >= 1 && self <= 100", "message": SHARING_MESSAGES["percent"]}
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    pod = status["properties"]["placement"]["properties"]["pods"]["items"]["properties"]
    assert pod["mpsShare"]["properties"] == {"percent": {"type": "integer"}}, "or the API server prunes the record"


def test_a_record_of_shares_reads_back_and_never_mixes() -> None:
    slot = PodSlot("j-d0-p0", 0, 0, "n0", (3,), 1, mps=MpsGrant(25))
    record = PlacementRecord(1, "seed", 1, 1, 1, (slot,), RankOrder.TP_DP_PP)
    status = {"placement": record.to_status()}
    assert status["placement"]["pods"][0]["mpsShare"] == {"percent": 25}
    back = record_from_status(status)
    assert back is not None and back.shared and not back.sliced and back.slots[0].mps == MpsGrant(25)
    two = PlacementRecord(1, "seed", 1, 1, 2, (slot, PodSlot("j-d1-p0", 1, 0, "n0", (4,), 1)), RankOrder.TP_DP_PP)
    with pytest.raises(MalformedRecord, match="mixes pods on MPS shares"):
        record_from_status({"placement": two.to_status()})


# ---- placing -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, QueuePolicy()], ids=["fifo", "queueing pass"])
def test_shares_of_one_namespace_and_size_share_a_gpu_and_its_claim(
    dra_world: list[dict[str, Any]], policy: QueuePolicy | None
) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE), node("hgx-1")], policy=policy)
    cluster.add_job(mps_job("a"))
    made = all_creates(cluster, 2)
    cluster.add_job(mps_job("b"))
    cluster.add_job(mps_job("other", namespace="ns2"))
    cluster.add_job(mps_job("half", percent=50))
    made += all_creates(cluster, 3)
    cluster.settle()
    for key in ("ns/a", "ns/b", "ns2/other", "ns/half"):
        assert cluster.phase(key) == "Running", key
    a, b = gpu_of(cluster, "ns/a"), gpu_of(cluster, "ns/b")
    assert a == b and a[0] == MIG_NODE, "packed onto the GPU the first share is on, on the DRA node"
    assert gpu_of(cluster, "ns2/other") not in (a,), "another namespace: another claim, another GPU"
    assert gpu_of(cluster, "ns/half") not in (a, gpu_of(cluster, "ns2/other")), "another size: another GPU"
    assert gpu_of(cluster, "ns2/other")[0] == gpu_of(cluster, "ns/half")[0] == MIG_NODE, "packed on the used node"
    by_pod = {c.manifest["metadata"]["name"]: c for c in made}
    claim_a, claim_b = by_pod["a-d0-p0"].claim, by_pod["b-d0-p0"].claim
    assert claim_a is not None and claim_a == claim_b
    assert claim_a.name == mps_claim_name(MIG_NODE, a[1], 25) and claim_a.devices == (f"gpu-{a[1]}",)
    assert claim_a.device_class == "gpu.nvidia.com" and claim_a.mps_percent == 25
    assert claim_a.mps_memory_mib == memory_limit_mib(cluster.last_view.nodes[MIG_NODE].gpu_memory_gib, 25) > 19_000
    spec = by_pod["b-d0-p0"].manifest["spec"]
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimName": claim_a.name}]
    assert "nvidia.com/gpu" not in spec["containers"][0]["resources"].get("limits", {})


def test_a_gpu_takes_as_many_shares_as_fit_and_no_more(dra_world: list[dict[str, Any]]) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE)])
    cluster.add_job(mps_job("thirds", percent=33, dp=4))
    cluster.add_job(mps_job("five", percent=20, dp=6))
    cluster.settle(4)
    thirds = [p["gpuIndices"][0] for p in pods_of(cluster, "ns/thirds")]
    five = [p["gpuIndices"][0] for p in pods_of(cluster, "ns/five")]
    assert sorted(thirds.count(g) for g in set(thirds)) == [1, 3], "floor(100 / 33) = 3 clients a GPU"
    assert sorted(five.count(g) for g in set(five)) == [1, 5]
    assert not set(thirds) & set(five), "two sizes never on one GPU"


def test_whole_gpu_jobs_and_mig_slices_keep_off_an_mps_gpu(dra_world: list[dict[str, Any]]) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE)])
    cluster.add_job(mps_job("small"))
    cluster.settle(3)
    _, shared = gpu_of(cluster, "ns/small")
    big = paralleljob("big", tp=8, pp=1, dp=1, memory=0)
    big["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": MIG_NODE}
    cluster.add_job(big)
    cluster.settle(3)
    status = cluster.job("ns/big")["status"]
    assert status["phase"] == "Queued"
    assert "hold MPS shares and are not offered whole" in status["message"], status["message"]
    assert f"{MIG_NODE} GPU {shared}" in status["message"]
    del cluster.jobs["ns/big"]
    sliced = paralleljob("slice", tp=1, pp=1, dp=7, memory=0, extra_spec={"gpuSharing": {"migProfile": "1g.10gb"}})
    cluster.add_job(sliced)
    cluster.settle(3)
    slice_gpus = {p["gpuIndices"][0] for p in pods_of(cluster, "ns/slice")}
    assert shared not in slice_gpus and len(slice_gpus) == 1, "seven slices fill one other GPU"
    cluster.add_job(mps_job("more", dp=3))
    cluster.settle(3)
    assert {p["gpuIndices"][0] for p in pods_of(cluster, "ns/more")} == {shared}, "three more fit the shared GPU"


def test_a_broken_gpu_fails_every_share_job_on_it_by_its_own_policy(dra_world: list[dict[str, Any]]) -> None:
    cluster = FakeCluster([dra_node(MIG_NODE)])
    cluster.add_job(mps_job("fragile", max_restarts=0))
    cluster.add_job(mps_job("sturdy"))
    cluster.settle(4)
    _, gpu = gpu_of(cluster, "ns/fragile")
    assert gpu_of(cluster, "ns/sturdy")[1] == gpu
    cluster.nodes[MIG_NODE] = dra_node(MIG_NODE, unhealthy=str(gpu))
    made = all_creates(cluster, 4)
    fragile, sturdy = cluster.job("ns/fragile")["status"], cluster.job("ns/sturdy")["status"]
    assert fragile["phase"] == "Failed" and fragile["lastFailure"]["kind"] == "GPUFailure"
    assert sturdy["phase"] == "Running" and sturdy["restarts"] == 1
    assert sturdy["lastFailure"]["action"] == "rescheduled"
    (moved,) = sturdy["placement"]["pods"]
    assert moved["gpuIndices"] != [gpu] and moved["mpsShare"] == {"percent": 25}
    (create,) = [c for c in made if c.manifest["metadata"]["name"].startswith("sturdy")]
    assert create.claim is not None and create.claim.name == mps_claim_name(MIG_NODE, moved["gpuIndices"][0], 25)


def test_no_dra_node_means_the_share_job_waits_saying_so() -> None:
    cluster = FakeCluster([node("hgx-0")])
    cluster.add_job(mps_job("small"))
    cluster.settle(3)
    status = cluster.job("ns/small")["status"]
    assert status["phase"] == "Queued" and "MPS shares are placed only on DRA nodes" in status["message"]


def test_the_gauges_the_gpu_map_and_describe_show_the_shares(dra_world: list[dict[str, Any]]) -> None:
    from rich.console import Console

    from paralleljob.clitools.describe import describe_job
    from paralleljob.clitools.gpumap import DraObjects, build_map
    from paralleljob.clitools.jobrender import description_renderable
    from paralleljob.clitools.render import gpu_map_renderable, print_renderable
    from paralleljob.k8s.plan.metrics_model import gauges

    cluster = FakeCluster([dra_node(MIG_NODE)])
    for name in ("a", "b"):
        cluster.add_job(mps_job(name))
    cluster.add_job(mps_job("c", percent=10, dp=2))
    cluster.settle(4)
    plan, view = cluster.step(), cluster.last_view
    assert view is not None
    g = gauges(view, plan.jobs, {})
    assert g.mps_gpus == 2 and g.mps_shares == {"25": 2, "10": 2} and g.sliced_gpus == 0
    _, gpu = gpu_of(cluster, "ns/a")
    gpu_map = build_map(
        list(cluster.nodes.values()), list(cluster.pods.values()), list(cluster.jobs.values()),
        dra_objects=DraObjects(slices=mig_pool(MIG_NODE)),
    )  # fmt: skip
    (row,) = gpu_map.nodes
    cell = row.gpus[gpu]
    assert cell.state == "used" and cell.holder == f"mps:{MIG_NODE}/{gpu}"
    assert cell.slices == ("ns/a 25%", "ns/b 25%")
    console = Console(width=160, record=True)
    print_renderable(gpu_map_renderable(gpu_map), console)
    assert f"s [{gpu}] MPS ns/a 25%, ns/b 25%" in console.export_text()
    from paralleljob.dashboard.model import pack_node

    assert f"{gpu}: MPS ns/a 25%, ns/b 25%" in pack_node(row, 0, {})["notes"], "the web view's node notes"

    described = describe_job(cluster.job("ns/c"), cluster.job_pods("ns/c"))
    assert described.mps_percent == 10 and [p.mps for p in described.pods] == ["10%", "10%"]
    console = Console(width=160, record=True)
    print_renderable(description_renderable(described), console)
    shown = console.export_text()
    assert "2 MPS shares of 10%" in shown and "MPS share" in shown

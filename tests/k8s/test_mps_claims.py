"""An MPS GPU's shared ResourceClaim (``edge/render/mpsclaims.py``): its config and allocation as NVIDIA's DRA
driver reads them, the executor making sure of it for several pods at once against the in-memory API (one
claim, allocated once, reserved for every pod that uses it, reservations of pods gone dropped), and the
collector deleting it once no record names it and no pod it is reserved for runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from paralleljob.core.rankorder import RankOrder
from paralleljob.k8s.edge.parse.dra import parse_claim
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import mpsclaims
from paralleljob.k8s.edge.render.claims import DeviceClaim
from paralleljob.k8s.edge.status.records import MpsGrant, PlacementRecord, PodSlot
from paralleljob.k8s.plan.actions import PodBind
from paralleljob.k8s.runtime.claimcollector import ClaimCollector
from paralleljob.k8s.runtime.executor import Executor, Outcome
from paralleljob.k8s.view.store import ObjectStore
from tests.k8s import factories
from tests.k8s.fakekube import FakeApi

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
NAME = mpsclaims.mps_claim_name("n0", 3, 25)
CLAIM = DeviceClaim(NAME, "gpu.nvidia.com", "n0", "gpu.nvidia.com", ("gpu-3",), mps_percent=25, mps_memory_mib=20480)


def test_the_claim_asks_for_one_gpu_with_the_drivers_mps_config_and_its_allocation_carries_it() -> None:
    manifest = mpsclaims.claim_manifest("ns", CLAIM)
    assert (
        manifest["metadata"]["name"] == "paralleljob-mps-n0-gpu3-25" and "ownerReferences" not in manifest["metadata"]
    )
    (config,) = manifest["spec"]["devices"]["config"]
    assert config["requests"] == ["gpus"]
    parameters = config["opaque"]["parameters"]
    assert config["opaque"]["driver"] == "gpu.nvidia.com"
    assert (parameters["apiVersion"], parameters["kind"]) == ("resource.nvidia.com/v1beta1", "GpuConfig")
    assert parameters["sharing"] == {
        "strategy": "MPS",
        "mpsConfig": {"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "20480Mi"},
    }
    allocation = mpsclaims.allocation(CLAIM, "n0")
    assert allocation["devices"]["results"] == [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n0", "device": "gpu-3"}
    ]
    (copied,) = allocation["devices"]["config"]
    assert copied == {"source": "FromClaim", **config}, "the driver reads the config from the allocation"
    info = parse_claim({**manifest, "status": {"allocation": allocation}})
    assert info.mps_share and not info.operator_owned


def test_names_stay_valid_and_memory_limits_are_whole_mib() -> None:
    long = mpsclaims.mps_claim_name("n" * 250, 7, 5)
    assert len(long) == 253 and long != mpsclaims.mps_claim_name("n" * 249 + "m", 7, 5)
    assert mpsclaims.memory_limit_mib(79.6, 25) == 20377 and mpsclaims.memory_limit_mib(0.0001, 1) == 1


def test_reservations_keep_the_live_pods_and_add_the_new_one() -> None:
    body = {"status": {"reservedFor": [
        {"resource": "pods", "name": "a", "uid": "ua"}, {"resource": "pods", "name": "gone", "uid": "ug"},
    ]}}  # fmt: skip
    assert mpsclaims.reservations(body, "b", "ub", {"ua"}) == [
        {"resource": "pods", "name": "a", "uid": "ua"},
        {"resource": "pods", "name": "b", "uid": "ub"},
    ]
    full = {"status": {"reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(256)]}}
    with pytest.raises(ValueError, match="allows 256"):
        mpsclaims.reservations(full, "b", "ub", {f"u{i}" for i in range(256)})


def test_wanted_claims_come_from_the_records_alone() -> None:
    slots = (
        PodSlot("j-d0-p0", 0, 0, "n0", (3,), mps=MpsGrant(25)),
        PodSlot("j-d1-p0", 1, 0, "n1", (0,), mps=MpsGrant(25)),
    )
    record = PlacementRecord(1, "seed", 1, 1, 2, slots, RankOrder.TP_DP_PP)
    assert mpsclaims.wanted_claims([("ns", record)]) == {("ns", NAME), ("ns", mpsclaims.mps_claim_name("n1", 0, 25))}


def _pod(name: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {}},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": phase},
    }


def _executor(api: FakeApi, pods: list[dict[str, Any]]) -> Executor:
    jobs = ObjectStore(parse_job)
    for name in ("a", "b"):
        jobs.upsert(factories.paralleljob(name, tp=1, pp=1, dp=1))
    pod_store = ObjectStore(parse_pod)
    for body in pods:
        pod_store.upsert(body)
    executor = Executor(api.client(), jobs, pod_store, lambda *a: None)
    executor.claim_store = ObjectStore(parse_claim)
    return executor


def test_two_jobs_pods_get_one_claim_allocated_once_and_reserved_for_both() -> None:
    api = FakeApi()
    executor = _executor(api, [_pod("a-d0-p0"), _pod("b-d0-p0")])
    outcomes = [Outcome(), Outcome()]

    async def both() -> list[bool]:
        return list(await asyncio.gather(
            executor._ensure_claim("ns/a", PodBind("ns", "a-d0-p0", "uid-a-d0-p0", "n0", CLAIM), CLAIM, outcomes[0]),
            executor._ensure_claim("ns/b", PodBind("ns", "b-d0-p0", "uid-b-d0-p0", "n0", CLAIM), CLAIM, outcomes[1]),
        ))  # fmt: skip

    assert asyncio.run(both()) == [True, True] and not outcomes[0].hold and not outcomes[1].hold
    claim = api.get(f"{CLAIMS}/{NAME}")
    assert claim is not None and api.count("POST", "resourceclaims") == 1
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == ["uid-a-d0-p0", "uid-b-d0-p0"]
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-3"
    assert claim["status"]["allocation"]["devices"]["config"][0]["source"] == "FromClaim"

    # a pod gone: its reservation is dropped when the next pod is added
    executor.pods.forget("ns", "a-d0-p0", "uid-a-d0-p0")
    again = Outcome()
    bind = PodBind("ns", "a-d0-p0", "uid-new", "n0", CLAIM)
    executor.pods.upsert({**_pod("a-d0-p0"), "metadata": {**_pod("a-d0-p0")["metadata"], "uid": "uid-new"}})
    assert asyncio.run(executor._ensure_claim("ns/a", bind, CLAIM, again)) and not again.hold
    claim = api.get(f"{CLAIMS}/{NAME}")
    assert claim is not None
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == ["uid-b-d0-p0", "uid-new"]


def test_a_claim_of_that_name_that_is_not_ours_is_never_used() -> None:
    api = FakeApi()
    api.seed(CLAIMS, {"metadata": {"name": NAME, "namespace": "ns"}, "spec": {}})
    executor = _executor(api, [_pod("a-d0-p0")])
    outcome = Outcome()
    bind = PodBind("ns", "a-d0-p0", "uid-a-d0-p0", "n0", CLAIM)
    assert not asyncio.run(executor._ensure_claim("ns/a", bind, CLAIM, outcome))
    assert "not the operator's MPS claim" in outcome.failures["ns/a"]


def test_the_collector_deletes_an_mps_claim_no_record_names_and_no_live_pod_uses() -> None:
    api = FakeApi()
    manifest = mpsclaims.claim_manifest("ns", CLAIM)
    used = {**manifest, "status": {"reservedFor": [{"resource": "pods", "name": "a-d0-p0", "uid": "uid-a-d0-p0"}]}}
    other = mpsclaims.claim_manifest("ns", DeviceClaim("paralleljob-mps-n0-gpu4-25", "d", "n0", "c", ("gpu-4",), 25, 1))
    third = mpsclaims.claim_manifest("ns", DeviceClaim("paralleljob-mps-n0-gpu5-25", "d", "n0", "c", ("gpu-5",), 25, 1))
    claims = ObjectStore(parse_claim)
    for body in (used, other, third):
        claims.upsert(api.seed(CLAIMS, body))
    pods = ObjectStore(parse_pod)
    pods.upsert(_pod("a-d0-p0"))
    ended: list[int] = []
    collector = ClaimCollector(api.client(), claims, pods, [], lambda: ended.append(1))

    async def collect() -> None:
        collector.collect(set(), lambda: {("ns", "paralleljob-mps-n0-gpu5-25")})
        await asyncio.gather(*collector.deletes.values())

    asyncio.run(collect())
    left = sorted(b["metadata"]["name"] for b in api.items(CLAIMS))
    # reserved for a running pod, or named by a record: kept; the other is garbage
    assert left == [NAME, "paralleljob-mps-n0-gpu5-25"]
    pods.upsert(_pod("a-d0-p0", phase="Succeeded"))
    asyncio.run(collect())
    assert sorted(b["metadata"]["name"] for b in api.items(CLAIMS)) == ["paralleljob-mps-n0-gpu5-25"]


def test_the_kept_view_holds_an_mps_gpu_until_its_last_share_goes_as_a_rebuild_does() -> None:
    from dataclasses import replace

    from paralleljob.k8s.view.clusterview import Claim, build_view
    from paralleljob.k8s.view.liveview import LiveView
    from paralleljob.k8s.view.viewcheck import view_differences
    from tests.k8s.viewworld import World, claim, node_body

    def shared(job: str, node: str, gpu: int) -> Claim:
        plain = claim(job, [(f"{job}-d0-p0", node, (gpu,))])
        slot = replace(plain.record.slots[0], mps=MpsGrant(25))
        return replace(plain, record=replace(plain.record, slots=(slot,)))

    world = World()
    world.put(world.nodes, node_body("n0", 8))
    live = LiveView(world.config, world.nodes, world.pods)
    live.refresh([])
    world.claims["ns/a"], world.claims["ns/b"] = shared("a", "n0", 2), shared("b", "n0", 2)
    view = live.refresh(world.claim_list())
    assert view.state.owner[2] == "mps:n0/2" and not view.conflicts and set(view.loaded) == {"ns/a", "ns/b"}
    del world.claims["ns/a"]
    assert live.refresh(world.claim_list()).state.owner[2] == "mps:n0/2", "b's share is still there"
    del world.claims["ns/b"]
    view = live.refresh(world.claim_list())
    assert view.state.owner[2] is None
    assert view_differences(view, build_view(world.nodes.values(), [], world.claim_list(), world.config)) == []
    whole = [claim("w", [("w-d0-p0", "n0", (0, 1))]), shared("c", "n0", 1)]
    conflicted = build_view(world.nodes.values(), [], whole, world.config)
    assert "MPS shares" in conflicted.conflicts["ns/c"]

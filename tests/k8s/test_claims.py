"""The operator's ResourceClaims (k8s/edge/render/claims.py) and how podsync asks for them on DRA nodes."""

from __future__ import annotations

import dataclasses
from typing import Any

from paralleljob.k8s.edge.parse.nodes import DraGpus, parse_node
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.claims import (
    DeviceClaim,
    allocation,
    claim_manifest,
    is_ours,
    reserved_for,
    state,
    with_claim,
)
from paralleljob.k8s.edge.status.records import PodSlot
from paralleljob.k8s.plan.pods.podsync import device_claim
from tests.k8s.factories import node, paralleljob
from tests.k8s.test_dra import CONFIG

CLAIM = DeviceClaim("w-d0-p0-gpus", "gpu.nvidia.com", "n1", "gpu.nvidia.com", ("gpu-4", "gpu-5"))


def test_claim_requests_tp_devices_of_the_class_and_belongs_to_the_job() -> None:
    job = parse_job(paralleljob("w"))
    body = claim_manifest(job, "w-d0-p0", CLAIM)
    (request,) = body["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}
    assert body["metadata"]["ownerReferences"][0]["uid"] == job.uid
    assert is_ours(body, job, "w-d0-p0") and not is_ours(body, job, "w-d1-p0")


def test_claim_state_tells_what_is_left_to_write() -> None:
    body: dict[str, Any] = {"status": {}}
    assert state(body, CLAIM, "pod-1") == "write"
    body["status"] = {"allocation": allocation(CLAIM, "n1"), "reservedFor": reserved_for("w-d0-p0", "pod-1")}
    assert state(body, CLAIM, "pod-1") == "done"
    assert state(body, CLAIM, "pod-2") == "write"  # same devices, a re-created pod: only reservedFor changes
    other = DeviceClaim(CLAIM.name, CLAIM.driver, CLAIM.pool, CLAIM.device_class, ("gpu-0", "gpu-1"))
    assert state(body, other, "pod-1") == "stale"  # an allocation is immutable: the claim is replaced
    results = body["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("n1", "gpu-4"), ("n1", "gpu-5")]


def test_pod_takes_its_gpus_from_the_claim_instead_of_the_device_plugin() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}},
                {"name": "b", "resources": {}},
            ]
        }
    }
    out = with_claim(pod, "w-d0-p0-gpus")
    first, second = out["spec"]["containers"]
    assert first["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "gpus"}]}
    assert "claims" not in second["resources"]
    assert out["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimName": "w-d0-p0-gpus"}]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"  # input untouched


def test_podsync_asks_for_a_claim_only_on_dra_nodes() -> None:
    plugin = parse_node(node("n0"), CONFIG)
    dra = parse_node(node("n1"), CONFIG)
    devices = tuple(f"gpu-{i}" for i in range(8))
    dra = dataclasses.replace(dra, dra=DraGpus("d", "n1", "cls", devices))
    nodes = {"n0": plugin, "n1": dra}
    assert device_claim(PodSlot("w-d0-p0", 0, 0, "n0", (0, 1)), nodes) is None
    claim = device_claim(PodSlot("w-d0-p0", 0, 0, "n1", (6, 7)), nodes)
    assert claim == DeviceClaim("w-d0-p0-gpus", "d", "n1", "cls", ("gpu-6", "gpu-7"))
    assert device_claim(PodSlot("w-d0-p0", 0, 0, "n1", (8,)), nodes) is None

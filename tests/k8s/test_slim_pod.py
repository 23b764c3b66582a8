"""What the operator keeps of a pod (edge/parse/slim.py ``slim_pod``): parsed exactly as the whole body, idempotent,
pure, and without what nothing reads (a worker's env and command, probe times, IPs)."""

from __future__ import annotations

import copy
import json
from typing import Any

from paralleljob.k8s.edge.constants import GPU_RESOURCE
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.slim import slim_pod
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_k8s_pod_groups import group_pod
from tests.k8s.test_native_pod_groups import native_pod

MANAGED = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {"f:phase": {}}}}]


def as_kubelet_reports(pod: dict[str, Any], phase: str, exit_code: int | None = None) -> dict[str, Any]:
    """``pod`` as the API holds it once a kubelet (or kwok) reported on it."""
    out = copy.deepcopy(pod)
    out["metadata"]["managedFields"] = MANAGED
    state: dict[str, Any] = {"running": {"startedAt": "2026-11-27T10:00:00Z"}}
    if exit_code is not None:
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Error" if exit_code else "Completed",
                "startedAt": "2026-11-27T10:00:00Z",
                "finishedAt": "2026-11-27T10:05:00Z",
            }
        }
    out["status"] = {
        "phase": phase,
        "podIP": "10.0.0.7",
        "hostIP": "10.1.0.1",
        "startTime": "2026-11-27T10:00:00Z",
        "conditions": [
            {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-11-27T10:00:01Z"}
        ],
        "containerStatuses": [
            {"name": c["name"], "image": "x", "imageID": "sha256:1", "ready": True, "restartCount": 0, "state": state}
            for c in out["spec"].get("containers", [])
        ],
    }
    if phase == "Failed":
        out["status"]["reason"], out["status"]["message"] = "Evicted", "the node ran out of memory"
    return out


def worker_pods() -> list[dict[str, Any]]:
    fc = FakeCluster([node(f"gpu-node-{i}") for i in range(2)])
    fc.add_job(paralleljob("llm", 2, 2, 2))
    fc.settle(4)
    return [copy.deepcopy(body) for body in fc.pods.values()]


def every_kind_of_pod() -> list[dict[str, Any]]:
    workers = worker_pods()
    assert workers and all(w["spec"]["containers"][0].get("env") for w in workers)  # the heavy part is there
    sidecar = foreign_pod("sidecars", "gpu-node-0", 1)
    sidecar["spec"]["initContainers"] = [
        {"name": "proxy", "image": "y", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "setup", "image": "z", "command": ["sh"], "resources": {"requests": {"memory": "2Gi"}}},
    ]
    sidecar["spec"]["overhead"] = {"cpu": "250m"}
    sidecar["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4", GPU_RESOURCE: "1"}
    return [
        *(as_kubelet_reports(w, "Running") for w in workers),
        as_kubelet_reports(workers[0], "Succeeded", exit_code=0),
        as_kubelet_reports(workers[1], "Failed", exit_code=137),
        as_kubelet_reports(workers[2], "Failed"),
        as_kubelet_reports(sidecar, "Running"),
        as_kubelet_reports(foreign_pod("plain", "gpu-node-1", 2), "Pending"),
        as_kubelet_reports(group_pod(0), "Pending"),
        as_kubelet_reports(native_pod(1), "Pending"),
    ]


def test_a_slimmed_pod_parses_exactly_as_the_whole_body_and_slimming_is_idempotent() -> None:
    for body in every_kind_of_pod():
        original = copy.deepcopy(body)
        slim = slim_pod(body)
        assert body == original  # pure
        assert parse_pod(slim) == parse_pod(body)
        assert slim_pod(slim) == slim
        assert "managedFields" not in slim["metadata"] and "podIP" not in slim["status"]
        assert slim["metadata"]["name"] == body["metadata"]["name"] and slim["metadata"]["uid"]


def test_a_worker_keeps_its_requests_not_its_container() -> None:
    body = as_kubelet_reports(worker_pods()[0], "Running")
    slim = slim_pod(body)
    container = slim["spec"]["containers"][0]
    assert set(container) <= {"name", "resources", "restartPolicy"} and container["resources"]
    assert "containerStatuses" not in slim["status"]  # nothing ended: nothing to read there
    assert len(json.dumps(slim)) * 2 < len(json.dumps(body))


def test_a_pod_group_member_keeps_its_whole_spec() -> None:
    for body in (group_pod(3), native_pod(2)):
        assert slim_pod(body)["spec"] == body["spec"]  # its node constraints are read from it

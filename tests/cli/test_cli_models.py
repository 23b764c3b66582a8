"""The CLI's pure models on a settled in-memory cluster (the operator's own decisions via the k8s harness):
the GPU map, the job description, drain/undrain patches, and the rich pictures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from paralleljob.agent.signals import DRAINED_GPUS_ANNOTATION, GPU_HEALTH_ANNOTATION, UNHEALTHY_GPUS_ANNOTATION
from paralleljob.clitools.describe import describe_job
from paralleljob.clitools.drain import parse_gpu_ref, plan
from paralleljob.clitools.gpumap import build_map
from paralleljob.clitools.jobrender import description_renderable
from paralleljob.clitools.render import gpu_map_renderable
from paralleljob.core.errors import InvalidRequest
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_dra import dra_node, gpu, resource_slice


def cluster() -> FakeCluster:
    nodes = [node(f"n{i}", leaf=f"leaf-{i // 2}") for i in range(4)]
    fc = FakeCluster(nodes)
    fc.add_job(paralleljob("llm", 4, 2, 2))
    fc.add_job(paralleljob("small", 2, 1, 1))
    fc.settle()
    assert fc.phase("ns/llm") == fc.phase("ns/small") == "Running"
    return fc


def gpu_map(fc: FakeCluster, pods: list[dict[str, Any]] | None = None) -> Any:
    return build_map(fc.nodes.values(), [*fc.pods.values(), *(pods or [])], fc.jobs.values())


def test_map_shows_every_gpu_and_who_holds_it() -> None:
    fc = cluster()
    m = gpu_map(fc)
    assert m.domain_level == "leaf" and len(m.by_domain()) == 2
    holders = {c.holder for row in m.nodes for c in row.gpus if c.holder}
    assert holders == {"ns/llm", "ns/small"}
    assert m.totals == {"free": 14, "used": 18, "closed": 0, "degraded": 0, "drained": 0, "unhealthy": 0, "total": 32}
    record = fc.job("ns/llm")["status"]["placement"]["pods"]
    for slot in record:
        row = next(r for r in m.nodes if r.name == slot["node"])
        assert all(row.gpus[i].holder == "ns/llm" for i in slot["gpuIndices"])
    jobs = {j.key: j for j in m.jobs}
    assert jobs["ns/llm"].shape == "4x2x2" and jobs["ns/llm"].gpus == 16 and jobs["ns/llm"].cost_ms is not None
    assert json.loads(json.dumps(m.to_json()))["totals"]["total"] == 32


def test_map_shows_unhealthy_degraded_drained_closed_and_foreign_gpus() -> None:
    fc = cluster()
    n0 = fc.nodes["n0"]["metadata"]["annotations"]
    n0[UNHEALTHY_GPUS_ANNOTATION] = "1,2"
    n0[DRAINED_GPUS_ANNOTATION] = "2"
    n0[GPU_HEALTH_ANNOTATION] = json.dumps(
        {"1": {"state": "Offline", "reason": "XID79"}, "5": {"state": "Degraded", "reason": "Thermal"}}
    )
    fc.nodes["n3"]["spec"]["unschedulable"] = True
    m = gpu_map(fc, [foreign_pod("other-gpu-job", "n3", 2)])
    rows = {r.name: r for r in m.nodes}
    assert rows["n0"].gpus[1].state == "unhealthy" and rows["n0"].gpus[1].reason == "Offline XID79"
    assert rows["n0"].gpus[2].state == "drained"
    assert rows["n0"].gpus[5].state == "degraded"
    assert not rows["n3"].schedulable and "cordoned" in rows["n3"].why_closed
    states = [c.state for c in rows["n3"].gpus]
    assert states.count("used") >= 2 and "closed" in states
    assert any(c.holder and c.holder.startswith("pod:") for c in rows["n3"].gpus)


def test_empty_cluster() -> None:
    m = build_map([], [], [])
    assert m.nodes == () and m.totals["total"] == 0
    Console(record=True, width=100).print(gpu_map_renderable(m))


def test_the_picture() -> None:
    fc = cluster()
    fc.nodes["n1"]["metadata"]["annotations"][UNHEALTHY_GPUS_ANNOTATION] = "7"
    console = Console(record=True, width=140, color_system=None)
    console.print(gpu_map_renderable(gpu_map(fc)))
    text = console.export_text()
    assert "leaf leaf-0" in text and "leaf leaf-1" in text
    assert "A ns/llm" in text and "B ns/small" in text
    assert "x" in text and "unhealthy" in text and "ParallelJobs" in text


def test_describe_lists_ranks_cost_conditions_and_events_in_order() -> None:
    fc = cluster()
    events = [
        {"type": "Normal", "reason": "Placed", "message": "on n0", "lastTimestamp": "2024-01-01T00:00:02Z"},
        {"type": "Normal", "reason": "Accepted", "message": "ok", "lastTimestamp": "2024-01-01T00:00:01Z", "count": 2},
    ]
    d = describe_job(fc.job("ns/llm"), fc.job_pods("ns/llm"), events)
    assert d.key == "ns/llm" and d.phase == "Running" and d.shape == "TP4 x PP2 x DP2" and d.gpus == 16
    assert [p.ranks for p in d.pods] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    # tp-dp-pp (the default): pipeline outermost, so both replicas' stage 0 come first
    assert d.rank_order == "tp-dp-pp"
    assert [(p.replica, p.stage) for p in d.pods] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert all(p.pod_phase == "Running" for p in d.pods)
    assert set(d.cost) >= {"tpMs", "ppMs", "dpMs", "totalMs", "bottleneck"}
    assert {c["type"] for c in d.conditions} >= {"Placed", "Bound"}
    assert [e.reason for e in d.events] == ["Accepted", "Placed"]
    console = Console(record=True, width=160, color_system=None)
    console.print(description_renderable(d))
    text = console.export_text()
    assert "placement by rank" in text and "12-15" in text and "tp-dp-pp" in text and "ok (x2)" in text


def test_describe_a_job_without_placement_or_with_a_bad_spec() -> None:
    bad = paralleljob("bad", extra_spec={"costModel": "nope"})
    d = describe_job(bad)
    assert d.pods == () and "costModel" in d.invalid and d.events == ()
    Console(record=True, width=100).print(description_renderable(d))


def test_drain_node_cordons_and_marks_every_gpu() -> None:
    body = node("n0")
    change = plan(body, None)
    assert change.patch["spec"] == {"unschedulable": True}
    annotations = change.patch["metadata"]["annotations"]
    assert annotations[UNHEALTHY_GPUS_ANNOTATION] == annotations[DRAINED_GPUS_ANNOTATION] == "0,1,2,3,4,5,6,7"
    assert change.patch["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
    drained = _apply(body, change.patch)
    info = parse_node(drained, TopologyConfig())
    # maintenance, not a failure: the GPUs are not broken (their jobs checkpoint before they move), but they
    # take no new work and the operator sees them drained
    assert info.cordoned and info.broken_gpus() == frozenset() and not info.takes_new_work
    assert info.drained_gpus == info.degraded_gpus == frozenset(range(8)) and info.drain_now_gpus == frozenset()
    urgent = parse_node(_apply(body, plan(body, None, now=True).patch), TopologyConfig())
    assert urgent.drain_now_gpus == frozenset(range(8))
    back = _apply(drained, plan(drained, None, undrain=True).patch)
    info = parse_node(back, TopologyConfig())
    assert not info.cordoned and info.broken_gpus() == frozenset() and info.takes_new_work


def test_gpu_drain_and_undrain_respect_the_agent() -> None:
    body = node("n0", unhealthy="3")
    body["metadata"]["annotations"][GPU_HEALTH_ANNOTATION] = json.dumps({"3": {"state": "Offline", "reason": "XID79"}})
    one = _apply(body, plan(body, [5]).patch)
    assert one["metadata"]["annotations"][UNHEALTHY_GPUS_ANNOTATION] == "3,5"
    assert "spec" not in plan(body, [5]).patch, "a single GPU does not cordon the node"
    # GPU 3 is the agent's (broken), GPU 5 the admin's (drained: not broken, no new work)
    info = parse_node(one, TopologyConfig())
    assert info.broken_gpus() == frozenset({3}) and info.drained_gpus == frozenset({5}) and 5 in info.degraded_gpus
    undo = plan(one, [3, 5], undrain=True)
    assert undo.unhealthy == frozenset({3}) and "GPU 3 stays unhealthy" in undo.notes[0]
    assert _apply(one, undo.patch)["metadata"]["annotations"].get(DRAINED_GPUS_ANNOTATION) is None


def test_drain_refuses_what_does_not_exist() -> None:
    with pytest.raises(InvalidRequest, match="has 8 GPUs"):
        plan(node("n0"), [8])
    with pytest.raises(InvalidRequest, match=r"no nvidia\.com/gpu capacity"):
        plan(node("cpu", gpus=0), None)
    assert parse_gpu_ref("gpu-node-003:5") == ("gpu-node-003", 5)
    for bad in ("gpu-node-003", ":5", "n:x"):
        with pytest.raises(InvalidRequest, match="NODE:INDEX"):
            parse_gpu_ref(bad)


def test_drain_on_a_dra_node_counts_the_gpus_of_its_resource_slice() -> None:
    """A DRA node publishes no nvidia.com/gpu: its GPUs are its pool's devices, indexed as the operator does."""
    body = dra_node("gpu-node-000")
    slices = [resource_slice("gpu-node-000", [gpu(0), gpu(1)])]
    one = plan(body, [1], slices=slices)
    assert one.patch["metadata"]["annotations"][UNHEALTHY_GPUS_ANNOTATION] == "1"
    whole = plan(body, None, slices=slices)
    assert whole.patch["spec"] == {"unschedulable": True} and whole.unhealthy == frozenset({0, 1})
    with pytest.raises(InvalidRequest, match=r"has 2 DRA devices of gpu\.nvidia\.com \(indices 0-1\); no GPU 2"):
        plan(body, [2], slices=slices)
    with pytest.raises(InvalidRequest, match=r"no ResourceSlice of driver gpu\.nvidia\.com"):
        plan(body, None)  # no slice listed (the DRA API not served): nothing says what its GPUs are


def _apply(body: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386) of the parts drain touches."""
    out = json.loads(json.dumps(body))
    annotations = out["metadata"].setdefault("annotations", {})
    for key, value in patch["metadata"]["annotations"].items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    for key, value in patch.get("spec", {}).items():
        if value is None:
            out["spec"].pop(key, None)
        else:
            out["spec"][key] = value
    return out

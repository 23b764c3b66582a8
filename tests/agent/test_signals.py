"""What lands on the Node for each kind of fault, read back with the operator's own parser
(``paralleljob.k8s.edge.parse.nodes.parse_node``): Offline/Resetting GPUs are broken, Degraded ones are not."""

from __future__ import annotations

import json

import pytest

from paralleljob.agent import signals
from paralleljob.agent.classify import Thresholds
from paralleljob.agent.hysteresis import Hysteresis
from paralleljob.agent.model import GpuSample, NodeSample, XidEvent
from paralleljob.agent.monitor import Monitor
from paralleljob.core.cluster import GPUHealth
from paralleljob.k8s.edge import constants
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_indices, parse_node
from tests.k8s.factories import node


def test_names_match_the_operator() -> None:
    assert signals.UNHEALTHY_GPUS_ANNOTATION == constants.UNHEALTHY_GPUS_ANNOTATION
    assert signals.GPU_HEALTHY_CONDITION == constants.GPU_HEALTHY_CONDITION
    for value in ("0,3, 5", "", "1,x,2", " 7 "):
        assert signals.parse_index_list(value) == parse_indices(value)[0]


def apply(body: dict, tracks_sample: NodeSample, xids: list[XidEvent]) -> tuple[dict, tuple[str, str, str]]:
    monitor = Monitor(Thresholds(), Hysteresis())
    result = monitor.step(tracks_sample, xids, 0.0)
    blocking = signals.blocking(result.tracks)
    changes = signals.annotation_patch(body["metadata"]["annotations"], blocking, signals.health_detail(result.tracks))
    for key, value in changes.items():
        if value is None:
            body["metadata"]["annotations"].pop(key, None)
        else:
            body["metadata"]["annotations"][key] = value
    condition = signals.gpu_condition(result.tracks, result.node_error)
    patch = signals.condition_patch(None, condition, "2024-01-01T00:00:00Z", heartbeat_due=False)
    assert patch is not None
    body["status"]["conditions"].extend(patch["status"]["conditions"])
    return body, condition


def eight(**changes: dict) -> NodeSample:
    return NodeSample(tuple(GpuSample(index=i, uuid=f"u{i}", **changes.get(str(i), {})) for i in range(8)))


@pytest.mark.parametrize(
    ("xid", "status", "reason", "broken"),
    [
        (79, "False", "XID79", {5}),  # bus: Offline
        (48, "False", "XID48", {5}),  # memory: Resetting
        (64, "False", "XID64", {5}),  # memory: Offline
        (74, "False", "XID74", {5}),  # NVLink: Resetting
        (119, "False", "XID119", {5}),  # firmware: Resetting
        (92, "True", "GPUsDegraded", set()),  # memory, correctable storm: Degraded, keeps its job
        (31, "True", "GPUsHealthy", set()),  # application: no action
        (43, "True", "GPUsHealthy", set()),
    ],
)
def test_each_xid_class_on_the_node(xid: int, status: str, reason: str, broken: set[int]) -> None:
    body, condition = apply(node("n"), eight(), [XidEvent(5, xid)])
    assert condition[:2] == (status, reason)
    info = parse_node(body, TopologyConfig())
    assert info.broken_gpus() == frozenset(broken), "the operator must see exactly the blocking GPUs"
    annotations = body["metadata"]["annotations"]
    assert annotations.get(constants.UNHEALTHY_GPUS_ANNOTATION) == (",".join(map(str, broken)) or None)
    detail = signals.parse_health_detail(annotations.get(signals.GPU_HEALTH_ANNOTATION))
    if status == "True" and reason == "GPUsHealthy":
        assert detail == {}
    else:
        assert detail[5]["reason"] == f"XID{xid}"


def test_degraded_gpus_do_not_take_the_node_down() -> None:
    body, condition = apply(node("n"), eight(**{"2": {"temperature_c": 95.0}}), [])
    assert condition[0] == "True" and condition[1] == "GPUsDegraded" and "GPU 2 Degraded" in condition[2]
    assert parse_node(body, TopologyConfig()).broken_gpus() == frozenset()


def test_several_faults_are_listed_together() -> None:
    body, condition = apply(node("n"), eight(**{"1": {"remap_pending": True}}), [XidEvent(6, 79)])
    assert condition[:2] == ("False", "GPUsUnhealthy")
    assert "GPU 1 Resetting" in condition[2] and "GPU 6 Offline" in condition[2]
    assert parse_node(body, TopologyConfig()).broken_gpus() == frozenset({1, 6})


def test_nvml_failing_node_wide_means_every_gpu() -> None:
    status, reason, _ = signals.gpu_condition({}, node_error="nvmlDeviceGetCount: Driver Not Loaded")
    assert (status, reason) == ("False", "NVMLUnavailable")
    body = node("n")
    body["status"]["conditions"].append({"type": "GPUHealthy", "status": status})
    assert parse_node(body, TopologyConfig()).broken_gpus() == frozenset(range(8))


def test_annotation_patch_keeps_drained_gpus_and_changes_only_what_differs() -> None:
    annotations = {signals.DRAINED_GPUS_ANNOTATION: "3,4", constants.UNHEALTHY_GPUS_ANNOTATION: "3,4"}
    assert signals.annotation_patch(annotations, set(), None) == {}
    assert signals.annotation_patch(annotations, {1}, '{"1":{}}') == {
        constants.UNHEALTHY_GPUS_ANNOTATION: "1,3,4",
        signals.GPU_HEALTH_ANNOTATION: '{"1":{}}',
    }
    assert signals.annotation_patch({constants.UNHEALTHY_GPUS_ANNOTATION: "1"}, set(), None) == {
        constants.UNHEALTHY_GPUS_ANNOTATION: None
    }


def test_condition_patch_moves_the_transition_time_only_with_the_status() -> None:
    wanted = ("False", "XID79", "GPU 5 Offline: ...")
    first = signals.condition_patch(None, wanted, "t1", heartbeat_due=False)
    assert first is not None
    previous = first["status"]["conditions"][0]
    assert signals.condition_patch(previous, wanted, "t2", heartbeat_due=False) is None
    beat = signals.condition_patch(previous, wanted, "t2", heartbeat_due=True)
    assert beat is not None and beat["status"]["conditions"][0]["lastTransitionTime"] == "t1"
    assert beat["status"]["conditions"][0]["lastHeartbeatTime"] == "t2"
    healed = signals.condition_patch(previous, ("True", "GPUsHealthy", "all 8 GPUs healthy"), "t3", False)
    assert healed is not None and healed["status"]["conditions"][0]["lastTransitionTime"] == "t3"


def test_health_detail_round_trips_and_junk_is_ignored() -> None:
    result = Monitor().step(eight(), [XidEvent(0, 79), XidEvent(3, 92)], 0.0)
    detail = signals.parse_health_detail(signals.health_detail(result.tracks))
    assert detail[0]["state"] == GPUHealth.OFFLINE.value and detail[3]["state"] == GPUHealth.DEGRADED.value
    assert signals.blocking_from_detail(detail) == frozenset({0})
    assert json.loads(signals.health_detail(result.tracks) or "{}").keys() == {"0", "3"}
    for junk in ("", "not json", "[1]", '{"x": {}}', None):
        assert signals.parse_health_detail(junk) == {}

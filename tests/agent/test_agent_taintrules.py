"""The agent on a DRA node (agent/taintrules.py, Agent.publish_rules): one DeviceTaintRule per non-healthy
GPU, selecting the device whose ``uuid`` attribute is the GPU's NVML UUID, deleted when the GPU recovers;
none on a node without a slice of the driver. The rules it writes parse, on the operator's side, into
exactly the taint the agent meant (k8s/edge/parse/taintrules.py)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from typing import Any

import pytest

from paralleljob.agent.hysteresis import GpuTrack, Hysteresis
from paralleljob.agent.kube import NodeApiError
from paralleljob.agent.metrics import AgentMetrics
from paralleljob.agent.runner import Agent, AgentConfig
from paralleljob.agent.signals import UNHEALTHY_GPUS_ANNOTATION
from paralleljob.agent.taintrules import (
    NODE_LABEL,
    DeviceRef,
    devices_by_uuid,
    node_label,
    rule_changes,
    rule_name,
    wanted_rules,
)
from paralleljob.agent.taintrules import device_order as agent_device_order
from paralleljob.core.cluster import GPUHealth
from paralleljob.devcluster.dra import device_uuid, resource_slice_manifest
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.k8s.edge.parse.dra import device_order as operator_device_order
from paralleljob.k8s.edge.parse.taintrules import parse_taint_rule
from tests.agent.fakes import FakeNode, fake_nvml

NODE = "gpu-node-000"
DRIVER = "gpu.nvidia.com"


def dev_slice(node: str = NODE, generation: int = 1) -> dict[str, Any]:
    body = copy.deepcopy(resource_slice_manifest(NodeShape(count=1, gpus_per_node=8, gpu_api="dra"), node, "uid"))
    body["spec"]["pool"]["generation"] = generation
    return body


class FakeDraNode(FakeNode):
    """A Node plus the node's ResourceSlices and a DeviceTaintRule store with the API's name uniqueness."""

    def __init__(
        self, slices: list[dict[str, Any]] | None = None, missing_api: bool = False, missing_rules: bool = False
    ) -> None:
        super().__init__(NODE)
        self.slices = slices if slices is not None else [dev_slice()]
        self.rules: dict[str, dict[str, Any]] = {}
        self.missing_api = missing_api
        self.missing_rules = missing_rules
        self.rule_writes: list[str] = []
        self.rv_rules = 100

    async def list_slices(self) -> list[dict[str, Any]]:
        self.calls.append("list_slices")
        if self.missing_api:
            raise NodeApiError(404, "the server could not find the requested resource")
        return copy.deepcopy(self.slices)

    async def list_rules(self, label_selector: str) -> list[dict[str, Any]]:
        self.calls.append("list_rules")
        if self.missing_rules:
            raise NodeApiError(404, "the server could not find the requested resource")
        key, _, value = label_selector.partition("=")
        return [copy.deepcopy(r) for r in self.rules.values() if r["metadata"]["labels"].get(key) == value]

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv_rules += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.rv_rules)
        body["spec"]["taint"].setdefault("timeAdded", "2026-01-01T00:00:00Z")
        return body

    async def create_rule(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name in self.rules:
            raise NodeApiError(409, "already exists")
        self.rules[name] = self._stamp(body)
        self.rule_writes.append(f"create {name}")

    async def replace_rule(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if self.rules[name]["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise NodeApiError(409, "conflict")
        self.rules[name] = self._stamp(body)
        self.rule_writes.append(f"update {name}")

    async def delete_rule(self, name: str) -> None:
        self.rules.pop(name, None)
        self.rule_writes.append(f"delete {name}")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


UUIDS = [{"poll": 0, "gpu": i, "set": {"uuid": device_uuid(NODE, i)}} for i in range(8)]


def make_agent(steps: list[dict[str, Any]], node: FakeNode, **config: Any) -> tuple[Agent, Clock]:
    clock = Clock()
    cfg = AgentConfig(node=NODE, interval_s=1.0, hysteresis=Hysteresis(recover_polls=2, hold_seconds=3.0))
    cfg = dataclasses.replace(cfg, dra_driver=DRIVER, **config)
    nvml = fake_nvml(UUIDS + steps, ecc_uncorrected_volatile=0, temperature_c=40)
    return Agent(cfg, nvml, node, AgentMetrics(), clock=clock), clock  # type: ignore[arg-type]


async def polls(agent: Agent, clock: Clock, count: int) -> None:
    for _ in range(count):
        await agent.poll()
        clock.now += 1.0


def test_devices_by_uuid_reads_this_nodes_newest_full_gpus() -> None:
    old, new = dev_slice(generation=1), dev_slice(generation=2)
    new["spec"]["devices"] = new["spec"]["devices"][:2]
    mig = copy.deepcopy(new["spec"]["devices"][0])
    mig["name"], mig["attributes"]["type"] = "gpu-0-mig-1", {"string": "mig"}
    new["spec"]["devices"].append(mig)
    other_node = dev_slice("gpu-node-001")
    devices = devices_by_uuid([old, new, other_node], NODE, DRIVER)
    assert devices == {
        device_uuid(NODE, 0): DeviceRef(DRIVER, NODE, "gpu-0", 0),
        device_uuid(NODE, 1): DeviceRef(DRIVER, NODE, "gpu-1", 1),
    }
    assert devices_by_uuid([old], NODE, "other.example.com") == {}


def test_names_and_labels_are_valid_and_deterministic() -> None:
    assert rule_name(NODE, "gpu-3") == "gpu-health.gpu-node-000.gpu-3"
    long_node = "n" * 250
    assert len(rule_name(long_node, "gpu-3")) <= 253 and rule_name(long_node, "gpu-3") == rule_name(long_node, "gpu-3")
    assert node_label(NODE) == NODE
    assert len(node_label(long_node)) <= 63 and node_label(long_node) != node_label("m" * 250)


def test_wanted_rules_map_states_to_effects_and_the_operator_reads_them_back() -> None:
    devices = devices_by_uuid([dev_slice()], NODE, DRIVER)
    uuids = {i: device_uuid(NODE, i) for i in range(8)}
    uuids[6] = "GPU-not-in-any-slice"
    tracks = {
        0: GpuTrack(GPUHealth.HEALTHY),
        2: GpuTrack(GPUHealth.OFFLINE),
        3: GpuTrack(GPUHealth.RESETTING),
        5: GpuTrack(GPUHealth.DEGRADED),
        6: GpuTrack(GPUHealth.OFFLINE),
    }
    wanted = wanted_rules(NODE, tracks, uuids, devices)
    assert wanted.unmatched == (6,)
    parsed = {name: parse_taint_rule(body) for name, body in wanted.rules.items()}
    assert {name: (r.selector.device, r.taint.effect, r.taint.value) for name, r in parsed.items()} == {
        "gpu-health.gpu-node-000.gpu-2": ("gpu-2", "NoExecute", "Offline"),
        "gpu-health.gpu-node-000.gpu-3": ("gpu-3", "NoExecute", "Resetting"),
        "gpu-health.gpu-node-000.gpu-5": ("gpu-5", "NoSchedule", "Degraded"),
    }
    assert all(r.selector.matches(DRIVER, NODE, r.selector.device) for r in parsed.values())
    assert all(not r.selector.matches(DRIVER, "gpu-node-001", r.selector.device) for r in parsed.values())


def test_rule_changes_create_update_and_delete_only_what_differs() -> None:
    devices = devices_by_uuid([dev_slice()], NODE, DRIVER)
    uuids = {i: device_uuid(NODE, i) for i in range(8)}
    before = wanted_rules(NODE, {1: GpuTrack(GPUHealth.OFFLINE), 2: GpuTrack(GPUHealth.DEGRADED)}, uuids, devices)
    existing = []
    for version, body in enumerate(before.rules.values()):
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(version + 7)
        stored["spec"]["taint"]["timeAdded"] = "2026-01-01T00:00:00Z"  # set by the server: not a difference
        existing.append(stored)
    assert not rule_changes(existing, before.rules)
    after = wanted_rules(NODE, {2: GpuTrack(GPUHealth.OFFLINE), 4: GpuTrack(GPUHealth.RESETTING)}, uuids, devices)
    changes = rule_changes(existing, after.rules)
    assert [b["metadata"]["name"] for b in changes.create] == ["gpu-health.gpu-node-000.gpu-4"]
    (update,) = changes.update
    assert update["metadata"]["name"] == "gpu-health.gpu-node-000.gpu-2"
    assert update["metadata"]["resourceVersion"] == "8" and update["spec"]["taint"]["effect"] == "NoExecute"
    assert changes.delete == ("gpu-health.gpu-node-000.gpu-1",)


def test_agent_writes_a_rule_for_a_failed_gpu_and_deletes_it_after_recovery() -> None:
    node = FakeDraNode()
    node.rules["gpu-health.gpu-node-000.gpu-7"] = {  # left by an agent that crashed before GPU 7 recovered
        "metadata": {"name": "gpu-health.gpu-node-000.gpu-7", "labels": {NODE_LABEL: NODE}, "resourceVersion": "1"},
        "spec": {"deviceSelector": {"device": "gpu-7"}, "taint": {"key": "k", "effect": "NoExecute"}},
    }
    node.rules["someone-elses"] = {"metadata": {"name": "someone-elses", "labels": {}}, "spec": {}}
    steps = [
        {"poll": 2, "gpu": 3, "xid": 79, "set": {"lost": True}},
        {"poll": 4, "gpu": 3, "set": {"lost": False}},
        {"poll": 4, "gpu": 5, "set": {"temperature_c": 95}},
    ]
    agent, clock = make_agent(steps, node)

    async def scenario() -> None:
        await polls(agent, clock, 2)
        assert sorted(node.rules) == ["someone-elses"]  # the leftover cleared; other writers' rules untouched
        await polls(agent, clock, 1)  # poll 2: XID 79 on GPU 3
        rule = node.rules["gpu-health.gpu-node-000.gpu-3"]
        assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": NODE, "device": "gpu-3"}
        assert rule["spec"]["taint"] == {
            "key": "paralleljob.dev/gpu-health",
            "value": "Offline",
            "effect": "NoExecute",
            "timeAdded": "2026-01-01T00:00:00Z",
        }
        assert rule["metadata"]["annotations"]["paralleljob.dev/gpu-health-reason"] == "XID79"
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "3"  # the annotation is still written
        writes, calls = len(node.rule_writes), len(node.calls)
        await polls(agent, clock, 1)  # nothing changed: no rule call at all
        assert len(node.rule_writes) == writes and "list_rules" not in node.calls[calls:]
        await polls(agent, clock, 1)  # poll 4: GPU 5 hot (Degraded at once), GPU 3 answers (held down)
        assert node.rules["gpu-health.gpu-node-000.gpu-5"]["spec"]["taint"]["effect"] == "NoSchedule"
        await polls(agent, clock, 4)  # GPU 3 back after 2 clean polls and 3 s
        assert sorted(node.rules) == ["gpu-health.gpu-node-000.gpu-5", "someone-elses"]
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) is None

    asyncio.run(scenario())


def test_agent_without_slices_for_its_node_writes_no_rules_and_stops_asking() -> None:
    node = FakeDraNode(slices=[dev_slice("gpu-node-001")])
    agent, clock = make_agent([{"poll": 1, "gpu": 2, "xid": 79, "set": {"lost": True}}], node)
    asyncio.run(polls(agent, clock, 6))
    assert node.rules == {} and node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "2"
    assert "list_rules" not in node.calls  # not a DRA node: no rule is ever looked at
    assert node.calls.count("list_slices") == 1


def test_agent_on_a_cluster_without_the_api_goes_on_with_the_annotation() -> None:
    node = FakeDraNode(missing_api=True)
    agent, clock = make_agent([{"poll": 1, "gpu": 2, "xid": 79, "set": {"lost": True}}], node)
    asyncio.run(polls(agent, clock, 4))
    assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "2"
    assert node.calls.count("list_slices") == 1 and "list_rules" not in node.calls


def test_device_order_is_the_operators() -> None:
    names = ["gpu-10", "gpu-2", "nvlink-switch", "gpu-0", "gpu-1", "abc"]
    assert sorted(names, key=agent_device_order) == sorted(names, key=operator_device_order)


def test_annotation_numbers_gpus_by_device_when_nvml_enumerates_them_otherwise() -> None:
    """NVML's index 1 is device gpu-6 here: the operator calls that GPU 6, so the annotation must too."""
    node = FakeDraNode()
    reversed_uuids = [{"poll": 0, "gpu": i, "set": {"uuid": device_uuid(NODE, 7 - i)}} for i in range(8)]
    agent, clock = make_agent([*reversed_uuids, {"poll": 1, "gpu": 1, "xid": 79, "set": {"lost": True}}], node)
    asyncio.run(polls(agent, clock, 2))
    assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "6"
    assert sorted(node.rules) == ["gpu-health.gpu-node-000.gpu-6"]
    assert node.info().unhealthy_gpus == frozenset({6})


def test_agent_on_a_cluster_without_rules_still_numbers_by_device_and_stops_asking() -> None:
    node = FakeDraNode(missing_rules=True)
    reversed_uuids = [{"poll": 0, "gpu": i, "set": {"uuid": device_uuid(NODE, 7 - i)}} for i in range(8)]
    agent, clock = make_agent([*reversed_uuids, {"poll": 1, "gpu": 0, "xid": 79, "set": {"lost": True}}], node)
    asyncio.run(polls(agent, clock, 5))
    assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "7"
    assert node.calls.count("list_rules") == 1


def test_a_gpu_whose_uuid_matches_no_device_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    """The fake NVML's own UUIDs (GPU-fake-...) name no DRA device: the agent must say so (once), not keep
    NVML's numbering silently."""
    node = FakeDraNode()
    agent, clock = make_agent([{"poll": 0, "gpu": 3, "set": {"uuid": "GPU-fake-0003"}}], node)
    with caplog.at_level(logging.WARNING, logger="paralleljob.agent"):
        asyncio.run(polls(agent, clock, 3))
    warnings = [r.getMessage() for r in caplog.records if "match no device" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "[3]" in warnings[0] and "GPU-fake-0003" in warnings[0] and "set: {uuid: ...}" in warnings[0]

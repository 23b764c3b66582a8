"""DeviceTaintRules as a health source (k8s/edge/parse/taintrules.py): parsed at the edge, matched by driver, pool and
device as kube-apiserver 1.36 defines the selector, laid over the GPUs of DRA pools exactly like a slice's
own taints, and patched into the kept cluster view so that it stays equal to a rebuild."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from paralleljob.core.cluster import GPUHealth
from paralleljob.k8s.edge.config import DraConfig, OperatorConfig
from paralleljob.k8s.edge.parse.dra import node_gpus, overlay_nodes, parse_slice
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.taintrules import (
    TAINT_RULES_PATH,
    DeviceSelector,
    DeviceTaint,
    TaintRuleInfo,
    parse_taint_rule,
)
from paralleljob.k8s.runtime import reflector as reflector_module
from paralleljob.k8s.runtime.api import ApiError
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.reconciler import Reconciler
from paralleljob.k8s.runtime.reflector import Watched
from paralleljob.k8s.runtime.runner import _reflector
from paralleljob.k8s.view.clusterview import build_view
from paralleljob.k8s.view.dranodes import OverlaidNodes
from paralleljob.k8s.view.liveview import LiveView
from paralleljob.k8s.view.store import ObjectStore
from tests.k8s.test_dra import CONFIG, DRA, dra_node, gpu, resource_slice
from tests.k8s.test_dra_liveview import DraWorld, _assert_equal
from tests.k8s.viewworld import node_body


def rule(
    name: str, effect: str = "NoExecute", key: str = "paralleljob.dev/gpu-health", **selector: str
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "5"},
        "spec": {"deviceSelector": selector, "taint": {"key": key, "value": "Offline", "effect": effect}},
    }


def test_rule_parses_selector_and_taint() -> None:
    info = parse_taint_rule(rule("r1", driver="gpu.nvidia.com", pool="n1", device="gpu-3"))
    assert info == TaintRuleInfo(
        "r1",
        DeviceSelector("gpu.nvidia.com", "n1", "gpu-3"),
        DeviceTaint("paralleljob.dev/gpu-health", "Offline", "NoExecute"),
    )
    assert info.selector.matches("gpu.nvidia.com", "n1", "gpu-3")
    assert not info.selector.matches("gpu.nvidia.com", "n1", "gpu-4")
    assert not info.selector.matches("other.example.com", "n1", "gpu-3")


def test_selector_fields_left_out_match_anything_and_no_selector_matches_nothing() -> None:
    every_gpu3 = parse_taint_rule(rule("r", device="gpu-3"))
    assert every_gpu3.selector.matches("gpu.nvidia.com", "n1", "gpu-3")
    assert every_gpu3.selector.matches("gpu.nvidia.com", "n2", "gpu-3")
    everything = parse_taint_rule(rule("all"))  # deviceSelector: {} selects every device
    assert everything.selector.matches("any.driver", "p", "d")
    body = rule("none")
    del body["spec"]["deviceSelector"]
    assert not parse_taint_rule(body).selector.matches("gpu.nvidia.com", "n1", "gpu-0")


def test_an_unknown_effect_reads_as_none_with_a_warning() -> None:
    info = parse_taint_rule(rule("odd", effect="NoEverything", device="gpu-0"))
    assert info.taint.effect == "None"
    assert any("unknown effect 'NoEverything'" in w for w in info.warnings)


def test_rules_taint_devices_like_slice_taints() -> None:
    slices = [parse_slice(resource_slice(name, [gpu(i) for i in range(8)])) for name in ("n1", "n2")]
    rules = [
        parse_taint_rule(rule("down", driver="gpu.nvidia.com", pool="n1", device="gpu-2")),
        parse_taint_rule(rule("soft", effect="NoSchedule", pool="n1", device="gpu-5")),
        parse_taint_rule(rule("info", effect="None", device="gpu-7")),  # gpu-7 of every pool
        parse_taint_rule(rule("elsewhere", driver="other.example.com", device="gpu-0")),
    ]
    pools = node_gpus(slices, "gpu.nvidia.com", rules)
    assert [d.name for d in pools["n1"].devices if d.taints] == ["gpu-2", "gpu-5", "gpu-7"]
    assert [d.name for d in pools["n2"].devices if d.taints] == ["gpu-7"]
    n1, n2 = overlay_nodes(
        [parse_node(dra_node("n1"), CONFIG), parse_node(dra_node("n2"), CONFIG)], slices, [], DRA, 80.0, rules
    )
    assert n1.unhealthy_gpus == frozenset({2}) and n1.degraded_gpus == frozenset({5, 7})
    assert n2.unhealthy_gpus == frozenset() and n2.degraded_gpus == frozenset({7})
    view = build_view([n1, n2], [], [], CONFIG)
    assert view.state.usable_free(view.node_index["n1"]) == 5


class RuleWorld(DraWorld):
    def __init__(self) -> None:
        super().__init__()
        self.rules: ObjectStore[TaintRuleInfo] = ObjectStore(parse_taint_rule)
        self.source = OverlaidNodes(self.nodes, self.slices, self.claims, DraConfig(), 80.0, self.rules)

    def fresh(self) -> Any:
        nodes = OverlaidNodes(self.nodes, self.slices, self.claims, DraConfig(), 80.0, self.rules).values()
        return build_view(nodes, self.pods.values(), [], CONFIG)


def test_rule_changes_are_patched_into_the_kept_view() -> None:
    world = RuleWorld()
    world.put(world.nodes, node_body("a-plugin", 8))
    for name in ("b-dra", "c-dra"):
        world.put(world.nodes, dra_node(name))
        world.put(world.slices, resource_slice(name, [gpu(i) for i in range(8)]))
    live = LiveView(CONFIG, world.source, world.pods)
    _assert_equal(world, live)

    def free(node: str) -> int:
        view = _assert_equal(world, live)
        assert not view.empty
        return int(view.state.usable_free(view.node_index[node]))

    world.put(world.rules, rule("b3", driver="gpu.nvidia.com", pool="b-dra", device="gpu-3"))
    assert (free("b-dra"), free("c-dra")) == (7, 8)
    world.put(world.rules, rule("b3", effect="NoSchedule", driver="gpu.nvidia.com", pool="b-dra", device="gpu-3"))
    assert free("b-dra") == 7  # Degraded now: still no new work
    world.put(world.rules, rule("every-gpu0", device="gpu-0"))  # both DRA pools at once
    assert (free("b-dra"), free("c-dra"), free("a-plugin")) == (6, 7, 8)
    world.put(world.rules, rule("b3", driver="gpu.nvidia.com", pool="c-dra", device="gpu-3"))  # moved
    assert (free("b-dra"), free("c-dra")) == (7, 6)
    world.delete(world.rules, "", "every-gpu0")
    world.delete(world.rules, "", "b3")
    assert (free("b-dra"), free("c-dra")) == (8, 8)
    assert live.rebuilds == {"start": 1}, live.rebuilds  # every rule change patched in, never rebuilt


class NoRulesApi:
    """A Kube that serves everything but DeviceTaintRules (a cluster before 1.36, or the gate off)."""

    def __init__(self) -> None:
        self.lists: list[str] = []

    async def list(self, path: str, transform: Any = None) -> tuple[list[dict[str, Any]], str]:
        self.lists.append(path)
        if path == TAINT_RULES_PATH:
            raise ApiError(404, "the server could not find the requested resource")
        return [], "1"


def test_a_cluster_without_device_taint_rules_is_logged_once_and_the_operator_goes_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO)  # an API the server does not serve is news, not a warning
    kube = NoRulesApi()
    reconciler = Reconciler(cast(Any, kube), OperatorConfig(), Metrics())
    monkeypatch.setattr(reflector_module, "ABSENT_RETRY_SECONDS", 0.01)
    rules = _reflector(cast(Any, kube), reconciler, "devicetaintrule", Watched(TAINT_RULES_PATH, optional=True))

    async def scenario() -> None:
        task = asyncio.create_task(rules.run())
        await asyncio.wait_for(rules.synced.wait(), 1)  # counts as listed: the first pass is not held up
        while kube.lists.count(TAINT_RULES_PATH) < 3:  # it keeps trying, quietly
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    assert rules.absent and len(reconciler.taint_rules) == 0
    assert (
        len([r for r in caplog.records if "DeviceTaintRules" in r.getMessage() or "devicetaintrules" in r.getMessage()])
        == 1
    )


def test_the_reconciler_reads_rules_from_its_watch_into_decisions_and_the_kept_view() -> None:
    async def scenario() -> Reconciler:
        reconciler = Reconciler(cast(Any, object()), OperatorConfig(view_check_passes=1), Metrics())
        reconciler.on_event("node", "ADDED", dra_node("n1"))
        reconciler.on_event("resourceslice", "ADDED", resource_slice("n1", [gpu(i) for i in range(8)]))
        await reconciler.pass_once()
        reconciler.on_event("devicetaintrule", "ADDED", rule("r", pool="n1", device="gpu-4"))
        await reconciler.pass_once()
        kept = reconciler.view.live.view
        assert kept is not None and kept.state.health[4] is GPUHealth.OFFLINE
        assert [n.unhealthy_gpus for n in kept.nodes.values()] == [frozenset({4})]
        reconciler.on_event("devicetaintrule", "DELETED", rule("r", pool="n1", device="gpu-4"))
        await reconciler.pass_once()
        kept = reconciler.view.live.view
        assert kept is not None and kept.state.health[4] is GPUHealth.HEALTHY
        assert [n.unhealthy_gpus for n in kept.nodes.values()] == [frozenset()]
        return reconciler

    reconciler = asyncio.run(scenario())
    assert reconciler.view.checks == 2 and reconciler.view.mismatches == 0


@pytest.mark.parametrize("kind", ["devicetaintrule", "resourceslice"])
def test_a_device_change_makes_the_next_pass_look_at_every_waiting_line_again(kind: str) -> None:
    """The waiting memo leaves quiet lines out while no node and no job changed; a DeviceTaintRule deleted (or
    a slice changed) changes what fits without either, and a job waiting for the device stayed Queued (the
    DRA health e2e caught it)."""
    reconciler = Reconciler(cast(Any, object()), OperatorConfig(), Metrics())
    reconciler.on_event("node", "ADDED", dra_node("n1"))
    reconciler.on_event("resourceslice", "ADDED", resource_slice("n1", [gpu(i) for i in range(8)]))
    reconciler.on_event("devicetaintrule", "ADDED", rule("r", pool="n1", device="gpu-4"))
    reconciler.waiting.owner = [None] * 8  # as a pass leaves it: a line was remembered
    reconciler.waiting.jobs["ns/waits"] = cast(Any, object())
    if kind == "devicetaintrule":
        reconciler.on_event(kind, "DELETED", rule("r", pool="n1", device="gpu-4"))
    else:
        reconciler.on_event(kind, "MODIFIED", resource_slice("n1", [gpu(i) for i in range(4)]))
    assert not reconciler.waiting.jobs and not reconciler.waiting.owner

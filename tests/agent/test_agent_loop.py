"""The agent's loop against an in-memory Node: what it writes, in which order, how rarely, and how it
recovers; metrics and ``/healthz`` over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from paralleljob.agent.hysteresis import Hysteresis
from paralleljob.agent.metrics import AgentMetrics, serve
from paralleljob.agent.runner import Agent, AgentConfig
from paralleljob.agent.signals import DRAINED_GPUS_ANNOTATION, GPU_HEALTH_ANNOTATION, UNHEALTHY_GPUS_ANNOTATION
from tests.agent.fakes import FakeNode, fake_nvml


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_agent(steps: list[dict[str, Any]], node: FakeNode, **config: Any) -> tuple[Agent, Clock]:
    clock = Clock()
    cfg = AgentConfig(node="gpu-node-000", interval_s=1.0, hysteresis=Hysteresis(recover_polls=3, hold_seconds=5.0))
    cfg = dataclasses.replace(cfg, **config)
    agent = Agent(cfg, fake_nvml(steps, ecc_uncorrected_volatile=0), node, AgentMetrics(), clock=clock)  # type: ignore[arg-type]
    return agent, clock


async def polls(agent: Agent, clock: Clock, count: int) -> None:
    for _ in range(count):
        await agent.poll()
        clock.now += 1.0


def never_all_broken_by_accident(node: FakeNode) -> None:
    """GPUHealthy=False with no indices means "every GPU" to the operator: never as a transient state."""
    for info in node.history:
        assert not (info.gpu_condition_false and not info.unhealthy_gpus), node.history


def test_xid79_then_recovery_with_hysteresis() -> None:
    node = FakeNode()
    steps = [{"poll": 2, "gpu": 5, "xid": 79, "set": {"lost": True}}, {"poll": 4, "gpu": 5, "set": {"lost": False}}]
    agent, clock = make_agent(steps, node)

    async def scenario() -> None:
        await polls(agent, clock, 2)  # polls 0, 1: healthy
        condition = node.condition()
        assert condition is not None and condition["status"] == "True" and condition["reason"] == "GPUsHealthy"
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) is None
        await polls(agent, clock, 1)  # poll 2 (t=2): XID 79
        condition = node.condition()
        assert condition is not None and (condition["status"], condition["reason"]) == ("False", "XID79")
        assert "GPU 5 Offline" in condition["message"]
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "5"
        assert node.info().broken_gpus() == frozenset({5})
        # Healthy again from poll 4 (t=4): three clean polls by t=6, but the hold runs until t=3+5=8.
        for t in (3, 4, 5, 6, 7):
            await polls(agent, clock, 1)
            assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "5", f"cleared too early at t={t}"
        await polls(agent, clock, 1)  # t=8
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) is None
        assert node.annotation(GPU_HEALTH_ANNOTATION) is None
        condition = node.condition()
        assert condition is not None and (condition["status"], condition["reason"]) == ("True", "GPUsHealthy")

    asyncio.run(scenario())
    never_all_broken_by_accident(node)
    metrics = agent.metrics.render().decode()
    assert 'paralleljob_agent_xid_total{class="bus",gpu="5",xid="79"} 1.0' in metrics
    assert 'paralleljob_agent_gpu_health{gpu="5",state="Healthy"} 1.0' in metrics
    assert "paralleljob_agent_polls_total 9.0" in metrics


def test_writes_only_on_change_plus_resync_and_heartbeat() -> None:
    node = FakeNode()
    agent, clock = make_agent([], node, resync_s=10.0, heartbeat_s=20.0)

    async def scenario() -> None:
        await polls(agent, clock, 1)
        assert node.calls == ["get", "status"]  # the first poll writes the condition once
        await polls(agent, clock, 9)  # t=1..9: nothing changed
        assert node.calls == ["get", "status"]
        await polls(agent, clock, 1)  # t=10: resync reads, finds everything right, writes nothing
        assert node.calls == ["get", "status", "get"]
        await polls(agent, clock, 10)  # t=20: heartbeat due
        assert node.calls[-1] == "status"

    asyncio.run(scenario())


def test_a_conflict_is_retried_and_admin_drained_gpus_are_kept() -> None:
    node = FakeNode()
    agent, clock = make_agent([{"poll": 1, "gpu": 1, "xid": 48}], node)
    node.body["metadata"]["annotations"].update({DRAINED_GPUS_ANNOTATION: "6", UNHEALTHY_GPUS_ANNOTATION: "6"})
    node.conflict_next = 1

    async def scenario() -> None:
        await polls(agent, clock, 2)

    asyncio.run(scenario())
    assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "1,6"
    assert node.calls.count("annotations") == 2, "one 409, one success"
    assert 'paralleljob_agent_node_writes_total{result="conflict"} 1.0' in agent.metrics.render().decode()
    never_all_broken_by_accident(node)


def test_an_api_error_is_retried_on_the_next_poll() -> None:
    node = FakeNode()
    agent, clock = make_agent([{"poll": 0, "gpu": 2, "xid": 95}], node)
    node.fail_next = 1

    async def scenario() -> None:
        await polls(agent, clock, 1)
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) is None
        await polls(agent, clock, 1)
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "2"

    asyncio.run(scenario())
    assert 'paralleljob_agent_node_writes_total{result="error"} 1.0' in agent.metrics.render().decode()


def test_someone_clearing_the_annotation_is_repaired_at_the_next_resync() -> None:
    node = FakeNode()
    agent, clock = make_agent([{"poll": 0, "gpu": 4, "set": {"remap_failed": True}}], node, resync_s=3.0)

    async def scenario() -> None:
        await polls(agent, clock, 1)
        assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "4"
        del node.body["metadata"]["annotations"][UNHEALTHY_GPUS_ANNOTATION]
        await polls(agent, clock, 3)

    asyncio.run(scenario())
    assert node.annotation(UNHEALTHY_GPUS_ANNOTATION) == "4"


def test_ecc_thermal_metrics_are_exported() -> None:
    node = FakeNode()
    steps = [{"poll": 0, "gpu": 3, "set": {"temperature_c": 91.0, "ecc_corrected_volatile": 12, "retired_pages": 2}}]
    agent, clock = make_agent(steps, node)
    asyncio.run(polls(agent, clock, 1))
    text = agent.metrics.render().decode()
    assert 'paralleljob_agent_temperature_celsius{gpu="3"} 91.0' in text
    assert 'paralleljob_agent_ecc_errors{counter="volatile",gpu="3",type="corrected"} 12.0' in text
    assert 'paralleljob_agent_retired_pages{gpu="3"} 2.0' in text
    assert 'paralleljob_agent_gpu_health{gpu="3",state="Degraded"} 1.0' in text
    condition = node.condition()
    assert condition is not None and (condition["status"], condition["reason"]) == ("True", "GPUsDegraded")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("stale", [False, True])
def test_metrics_and_healthz_over_http(stale: bool) -> None:
    metrics = AgentMetrics(stale_after_s=0.0 if stale else 60.0)
    port = _free_port()

    async def scenario() -> tuple[tuple[int, str], tuple[int, str]]:
        runner = await serve(metrics, "127.0.0.1", port)
        try:
            base = f"http://127.0.0.1:{port}"
            scraped = await asyncio.to_thread(_get, base + "/metrics")
            health = await asyncio.to_thread(_get, base + "/healthz")
            return scraped, health
        finally:
            await runner.cleanup()

    (code, body), (health_code, health_body) = asyncio.run(scenario())
    assert code == 200 and "paralleljob_agent_polls_total" in body
    assert (health_code, health_body) == ((503, "no NVML poll completed recently\n") if stale else (200, "ok\n"))

"""The health agent on the real API server: run as ``paralleljob agent --fake-nvml`` against a fake node, a
scripted XID 79 on a GPU under a running job reaches the node, the operator moves the pod off that GPU, and
the node is cleared again after the GPU recovers (hysteresis)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pjhelpers import Jobs, assert_gang_on_record, assert_no_gpu_used_twice, free_port, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

INTERVAL = 0.2


class AgentProcess:
    def __init__(self, kubeconfig: Path, node: str, script: Path, log: Path) -> None:
        self.port = free_port()
        self.log = log
        argv = [
            sys.executable, "-m", "paralleljob.cli", "agent",
            "--node", node, "--fake-nvml", str(script), "--kubeconfig", str(kubeconfig),
            "--interval", str(INTERVAL), "--recover-polls", "2", "--hold-seconds", "1",
            "--metrics-port", str(self.port), "--metrics-host", "127.0.0.1",
        ]  # fmt: skip
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.stop()


def node_signals(kube: KubeSession, name: str) -> tuple[str | None, Any]:
    node = kube.run(kube.core.read_node(name))
    annotation = (node.metadata.annotations or {}).get("paralleljob.dev/unhealthy-gpus")
    condition = next((c for c in node.status.conditions or [] if c.type == "GPUHealthy"), None)
    return annotation, condition


def test_xid79_from_the_agent_moves_the_pod_off_the_gpu_and_clears_after_recovery(
    pjs: Jobs,
    nodes_restored: KubeSession,
    dev_cluster: DevCluster,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    kube = nodes_restored
    pjs.create("xid", 2, 1, 2, failurePolicy={"strategy": "minimal"})
    before = pjs.wait_phase("xid", "Running")
    victim = before["placement"]["pods"][0]
    node, gpu = victim["node"], victim["gpuIndices"][0]
    others = {p["name"] for p in before["placement"]["pods"][1:]}
    old_uids = {p.metadata.name: p.metadata.uid for p in pjs.live_pods("xid")}

    # Poll 2: XID 79 and the GPU is lost; poll 25 (~5 s later): it answers again.
    script = tmp_path / "xid79.yaml"
    script.write_text(
        f"gpus: 8\nsteps:\n  - {{poll: 2, gpu: {gpu}, xid: 79, set: {{lost: true}}}}\n"
        f"  - {{poll: 25, gpu: {gpu}, set: {{lost: false}}}}\n"
    )
    agent = AgentProcess(dev_cluster.kubeconfig, node, script, tmp_path / "agent.log")
    agents.append(agent)

    def marked() -> Any:
        annotation, condition = node_signals(kube, node)
        if annotation == str(gpu) and condition is not None and condition.status == "False":
            return condition
        return None

    started = time.monotonic()
    try:
        condition = wait_for(f"agent marks {node} GPU {gpu}", marked, timeout_s=20)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nagent log:\n{agent.log_tail()}") from None
    assert condition.reason == "XID79" and f"GPU {gpu} Offline" in condition.message
    metrics = agent.metrics()  # read now: the scripted recovery is ~20 polls away
    assert f'paralleljob_agent_xid_total{{class="bus",gpu="{gpu}",xid="79"}} 1.0' in metrics
    assert f'paralleljob_agent_gpu_health{{gpu="{gpu}",state="Offline"}} 1.0' in metrics

    status = pjs.wait_phase("xid", "Running", restarts=1)
    repaired_s = time.monotonic() - started
    assert status["lastFailure"]["kind"] == "GPUFailure"
    assert_gang_on_record(pjs, "xid")
    assert_no_gpu_used_twice(kube)
    for pod in status["placement"]["pods"]:
        assert not (pod["node"] == node and gpu in pod["gpuIndices"]), f"{pod['name']} still on {node}/{gpu}"
    new_uids = {p.metadata.name: p.metadata.uid for p in pjs.live_pods("xid")}
    assert new_uids[victim["name"]] != old_uids[victim["name"]]
    assert all(new_uids[name] == old_uids[name] for name in others), "minimal repair re-creates only the victim"

    def cleared() -> bool:
        annotation, condition = node_signals(kube, node)
        return annotation is None and condition is not None and condition.status == "True"

    wait_for(f"agent clears {node} after recovery", cleared, timeout_s=20)
    assert agent.stop() == 0, agent.log_tail()
    print(f"XID 79 to repaired gang: {repaired_s:.2f} s (agent start included)")

"""Health from DRA device taints end to end (issue 13, part 3), on kube-apiserver 1.36 with DeviceTaintRules
(``resource.k8s.io/v1beta2``, gate ``DRADeviceTaintRules``) and kube-controller-manager's device-taint
eviction controller running beside the operator.

- A ``NoExecute`` rule on a device in use moves only the pod on that device; its claim is replaced by one
  allocated with other devices. kube-controller-manager evicts that pod too (it deletes pods whose claims
  hold a NoExecute-tainted device); the operator counts it as one GPU failure and repairs it by the job's
  failure policy, whichever of the two deletes the pod first.
- A ``NoSchedule`` rule keeps new work off the device, leaves the job already on it alone, and deleting
  the rule lets the device be used again.
- The health agent, on a DRA node, turns a fake-NVML XID 79 into a DeviceTaintRule for exactly that GPU's
  device (found by UUID), the operator moves the pod off it, and the agent deletes the rule on recovery.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import drahelpers
import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from pjhelpers import Jobs, assert_no_gpu_used_twice, free_port, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.dra import device_uuid
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

RULES = ("resource.k8s.io", "v1beta2", "devicetaintrules")
DRIVER = "gpu.nvidia.com"


class Rules:
    """DeviceTaintRules made by a test (all of them deleted afterwards, the agent's included)."""

    def __init__(self, kube: KubeSession) -> None:
        self.kube = kube
        self.custom: Any = CustomObjectsApi(kube.api)

    def create(self, name: str, effect: str, **selector: str) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {"deviceSelector": selector, "taint": {"key": "e2e.paralleljob.dev/broken", "effect": effect}},
        }
        self.kube.run(self.custom.create_cluster_custom_object(*RULES, body))

    def delete(self, name: str) -> None:
        self.kube.run(self.custom.delete_cluster_custom_object(*RULES, name))

    def all(self) -> dict[str, dict[str, Any]]:
        listed = self.kube.run(self.custom.list_cluster_custom_object(*RULES))
        return {item["metadata"]["name"]: item for item in listed["items"]}

    def clear(self) -> None:
        for name in self.all():
            self.delete(name)


@pytest.fixture
def rules(dra_kube: KubeSession) -> Iterator[Rules]:
    made = Rules(dra_kube)
    try:
        yield made
    finally:
        made.clear()


def test_noexecute_rule_moves_only_the_pod_on_that_device_and_replaces_its_claim(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_namespace: str, rules: Rules
) -> None:
    dra_pjs.create("tainted", tp=2, pp=1, dp=2, failurePolicy={"strategy": "minimal"})
    before = dra_pjs.wait_phase("tainted", "Running", timeout_s=60)
    victim, other = before["placement"]["pods"]
    node, device = victim["node"], f"gpu-{victim['gpuIndices'][0]}"
    uids = {p.metadata.name: p.metadata.uid for p in dra_pjs.live_pods("tainted")}
    claims = {name: c["metadata"]["uid"] for name, c in drahelpers.claims(dra_kube, dra_namespace).items()}

    rules.create("e2e-noexecute", "NoExecute", driver=DRIVER, pool=node, device=device)
    after = dra_pjs.wait_phase("tainted", "Running", timeout_s=60, restarts=1)
    assert after["lastFailure"]["kind"] == "GPUFailure" and after["lastFailure"]["pods"] == [victim["name"]]
    moved = {p["name"]: p for p in after["placement"]["pods"]}[victim["name"]]
    assert (node, device) not in [(moved["node"], f"gpu-{i}") for i in moved["gpuIndices"]]
    now = {p.metadata.name: p.metadata.uid for p in dra_pjs.live_pods("tainted")}
    assert now[victim["name"]] != uids[victim["name"]] and now[other["name"]] == uids[other["name"]]

    def replaced() -> bool:
        current = drahelpers.claims(dra_kube, dra_namespace)
        return (
            len(current) == 2
            and current[f"{victim['name']}-gpus"]["metadata"]["uid"] != claims[f"{victim['name']}-gpus"]
        )

    wait_for("the victim's claim replaced, no other claim left", replaced, timeout_s=30)
    current = drahelpers.claims(dra_kube, dra_namespace)
    assert current[f"{other['name']}-gpus"]["metadata"]["uid"] == claims[f"{other['name']}-gpus"]
    assert (node, device) not in drahelpers.claim_devices(current[f"{victim['name']}-gpus"])
    drahelpers.assert_claims_match_placement(dra_pjs, dra_kube, "tainted")
    assert_no_gpu_used_twice(dra_kube)
    time.sleep(3)  # kube-controller-manager's eviction and the operator's repair were one failure, not two
    assert dra_pjs.status("tainted")["restarts"] == 1


def test_noschedule_rule_keeps_new_work_off_the_device_until_it_is_deleted(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, rules: Rules
) -> None:
    dra_pjs.create("resident", tp=8, pp=1, dp=1)
    resident = dra_pjs.wait_phase("resident", "Running", timeout_s=60)
    # gpu-3 of every pool: no selector for the pool, so one rule covers all four nodes.
    rules.create("e2e-noschedule", "NoSchedule", driver=DRIVER, device="gpu-3")
    dra_pjs.create("half", tp=4, pp=1, dp=2)
    half = dra_pjs.wait_phase("half", "Running", timeout_s=60)
    assert all(3 not in p["gpuIndices"] for p in half["placement"]["pods"]), half["placement"]
    dra_pjs.create("whole", tp=8, pp=1, dp=1)  # eight GPUs of one node: every node's gpu-3 is tainted
    dra_pjs.wait_phase("whole", "Queued", timeout_s=30)
    time.sleep(2)
    assert dra_pjs.status("whole")["phase"] == "Queued"
    assert dra_pjs.status("resident")["restarts"] == 0 == resident["restarts"]  # NoSchedule: it stays

    rules.delete("e2e-noschedule")
    whole = dra_pjs.wait_phase("whole", "Running", timeout_s=60)
    (pod,) = whole["placement"]["pods"]
    assert 3 in pod["gpuIndices"]  # the device is used again
    drahelpers.assert_claims_match_placement(dra_pjs, dra_kube, "whole")
    assert_no_gpu_used_twice(dra_kube)


class AgentProcess:
    def __init__(self, kubeconfig: Path, node: str, script: Path, log: Path) -> None:
        self.log = log
        argv = [
            sys.executable, "-m", "paralleljob.cli", "agent",
            "--node", node, "--fake-nvml", str(script), "--kubeconfig", str(kubeconfig),
            "--interval", "0.2", "--recover-polls", "2", "--hold-seconds", "1",
            "--metrics-port", str(free_port()), "--metrics-host", "127.0.0.1", "--dra-driver", DRIVER,
        ]  # fmt: skip
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

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


def test_agent_xid_becomes_a_device_taint_rule_the_operator_acts_on(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, dra_namespace: str, rules: Rules, tmp_path: Path
) -> None:
    dra_pjs.create("xid", tp=2, pp=1, dp=2, failurePolicy={"strategy": "minimal"})
    before = dra_pjs.wait_phase("xid", "Running", timeout_s=60)
    victim = before["placement"]["pods"][0]
    node, gpu = victim["node"], victim["gpuIndices"][0]
    # The fake GPUs carry the UUIDs the node's slice publishes (the dev cluster derives them from the node).
    uuids = "".join(f"  - {{poll: 0, gpu: {i}, set: {{uuid: {device_uuid(node, i)}}}}}\n" for i in range(8))
    script = tmp_path / "xid79.yaml"
    script.write_text(
        f"gpus: 8\nsteps:\n{uuids}"
        f"  - {{poll: 2, gpu: {gpu}, xid: 79, set: {{lost: true}}}}\n"
        f"  - {{poll: 40, gpu: {gpu}, set: {{lost: false}}}}\n"
    )
    agent = AgentProcess(dra_cluster.kubeconfig, node, script, tmp_path / "agent.log")
    try:
        name = f"gpu-health.{node}.gpu-{gpu}"
        try:
            rule = wait_for(f"the agent's DeviceTaintRule {name}", lambda: rules.all().get(name), timeout_s=20)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nagent log:\n{agent.log_tail()}") from None
        assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": node, "device": f"gpu-{gpu}"}
        assert (rule["spec"]["taint"]["key"], rule["spec"]["taint"]["effect"]) == (
            "paralleljob.dev/gpu-health",
            "NoExecute",
        )
        assert rule["metadata"]["annotations"]["paralleljob.dev/gpu-uuid"] == device_uuid(node, gpu)

        status = dra_pjs.wait_phase("xid", "Running", timeout_s=60, restarts=1)
        assert status["lastFailure"]["kind"] == "GPUFailure"
        for pod in status["placement"]["pods"]:
            assert not (pod["node"] == node and gpu in pod["gpuIndices"]), f"{pod['name']} still on {node}/{gpu}"
        drahelpers.assert_claims_match_placement(dra_pjs, dra_kube, "xid")
        claimed = [d for c in drahelpers.claims(dra_kube, dra_namespace).values() for d in drahelpers.claim_devices(c)]
        assert (node, f"gpu-{gpu}") not in claimed

        # The GPU answers again: after the hysteresis the agent deletes its rule.
        wait_for(f"the agent deletes {name} after recovery", lambda: name not in rules.all(), timeout_s=30)
        assert agent.stop() == 0, agent.log_tail()
    finally:
        agent.stop()
    # Cleared, the device is free for new work again: a job that needs every GPU of the cluster runs.
    dra_pjs.delete("xid")
    dra_pjs.create("everything", tp=8, pp=1, dp=len(dra_cluster.nodes))
    everything = dra_pjs.wait_phase("everything", "Running", timeout_s=60)
    assert any(p["node"] == node and gpu in p["gpuIndices"] for p in everything["placement"]["pods"])

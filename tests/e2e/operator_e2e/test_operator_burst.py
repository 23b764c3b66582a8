"""A burst of 3,000 ParallelJob creations against two operator replicas (issue 29): the leader keeps its
Lease through the burst (or, if it hands over, no GPU is given twice), and every job ends Running or Queued
with the reason it waits. The jobs are created through the API server as fast as it takes them (many
create calls in flight at once), 1-GPU jobs on the 64-GPU e2e cluster, so almost all of them queue."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pjhelpers import Jobs, OperatorProcess, assert_no_gpu_used_twice, wait_for

from paralleljob.k8s.edge.constants import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.e2e

BURST = 3_000
IN_FLIGHT = 64  # create calls at once
LEASE = ("paralleljob-operator", "default")


def _lease_transitions(pjs: Jobs) -> int:
    from kubernetes_asyncio.client import CoordinationV1Api

    lease = pjs.kube.run(CoordinationV1Api(pjs.kube.api).read_namespaced_lease(*LEASE))
    return int(lease.spec.lease_transitions or 0)


def _create_all(pjs: Jobs, bodies: list[dict[str, Any]]) -> None:
    async def create_all() -> None:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                await pjs.custom.create_namespaced_custom_object(GROUP, VERSION, pjs.namespace, PLURAL, body)

        await asyncio.gather(*(one(b) for b in bodies))

    pjs.kube.run(create_all())


def _verdicts(pjs: Jobs) -> dict[str, tuple[str, str]]:
    """name -> (phase, the Placed condition's reason when it waits)."""
    listed = pjs.kube.run(pjs.custom.list_namespaced_custom_object(GROUP, VERSION, pjs.namespace, PLURAL))
    out = {}
    for item in listed.get("items", []):
        status = item.get("status") or {}
        placed: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Placed"), {})
        reason = placed.get("reason", "") if placed.get("status") == "False" else ""
        out[item["metadata"]["name"]] = (status.get("phase", ""), reason)
    return out


def test_a_burst_of_3000_creations_keeps_the_lease_and_decides_every_job(
    pjs: Jobs, pj_operator: OperatorProcess
) -> None:
    standby = OperatorProcess(pj_operator.kubeconfig, pj_operator.log_dir, identity="e2e-burst-standby")
    standby.start(wait=False)
    try:
        transitions = _lease_transitions(pjs)
        started = time.monotonic()
        _create_all(pjs, [Jobs.manifest(f"b{i:04d}", 1, 1, 1) for i in range(BURST)])
        created_s = time.monotonic() - started

        def all_decided() -> dict[str, tuple[str, str]] | None:
            verdicts = _verdicts(pjs)
            settled = len(verdicts) == BURST and all(
                phase == "Running" or (phase == "Queued" and reason) for phase, reason in verdicts.values()
            )
            return verdicts if settled else None

        verdicts = wait_for("every job Running or Queued with a reason", all_decided, timeout_s=150, interval=2.0)
        decided_s = time.monotonic() - started
        running = [name for name, (phase, _) in verdicts.items() if phase == "Running"]
        reasons = {reason for phase, reason in verdicts.values() if phase == "Queued"}
        assert 0 < len(running) <= 64, f"{len(running)} 1-GPU jobs running on 64 GPUs"
        assert reasons <= {"Unschedulable", "Waiting"}, reasons
        handovers = _lease_transitions(pjs) - transitions
        if handovers == 0:
            assert pj_operator.is_leader() and not standby.is_leader(), "the leader kept its lease"
        assert_no_gpu_used_twice(pjs.kube)  # whoever leads, no GPU is given twice
        print(f"{BURST} jobs created in {created_s:.1f} s, all decided after {decided_s:.1f} s; handovers {handovers}")
        assert handovers == 0, f"leadership changed {handovers} times during the burst"
    finally:
        standby.stop()
        # 3,000 deletes one by one would take minutes: one collection delete, then the fixture waits for pods
        pjs.kube.run(pjs.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, pjs.namespace, PLURAL))

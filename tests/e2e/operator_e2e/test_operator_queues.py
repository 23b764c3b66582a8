"""Queues on a real API server with the core's queueing pass (``--queue-policy fair-backfill-preempt``):
fair share between two tenants, and a checkpoint-aware preemption with a short grace period.

The module runs its own operator (the module-scoped ``pj_operator`` is overridden here), so the default
strict-FIFO operator of the other modules is never running beside it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pjhelpers import Jobs, OperatorProcess, assert_gang_on_record, assert_no_gpu_used_twice, running, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import CHECKPOINT_REQUESTED_ANNOTATION, GROUP, VERSION

pytestmark = pytest.mark.e2e

# Long enough that the checks made within the grace period still fall inside it on a loaded machine.
GRACE_S = 10
QUEUES = (GROUP, VERSION, "paralleljobqueues")


@pytest.fixture(scope="module")
def pj_operator(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    args = ("--queue-policy", "fair-backfill-preempt", "--preemption-grace-seconds", str(GRACE_S))
    with running(OperatorProcess(dev_cluster.kubeconfig, tmp_path_factory.mktemp("operator"), extra_args=args)) as proc:
        yield proc


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == ctype), {})


def test_the_light_tenant_is_admitted_before_more_of_the_heavy_one(pjs: Jobs, kube: KubeSession) -> None:
    heavy, light = f"heavy-{pjs.namespace}"[:63], f"light-{pjs.namespace}"[:63]
    for name in (heavy, light):
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": name}}
        kube.run(pjs.custom.create_cluster_custom_object(*QUEUES, {**body, "spec": {"weight": 1}}))
    try:
        pjs.create("h-big", 8, 1, 7, queue=heavy)  # 56 of the 64 GPUs
        pjs.wait_phase("h-big", "Running")
        pjs.create("h-fill", 8, 1, 1, queue=heavy)  # the last 8
        pjs.wait_phase("h-fill", "Running")
        pjs.create("h-more", 8, 1, 1, queue=heavy)  # submitted first ...
        pjs.wait_phase("h-more", "Queued")
        time.sleep(1.1)  # queuedAt has whole seconds: make the order unambiguous
        pjs.create("l-one", 8, 1, 1, queue=light)  # ... but the light tenant holds nothing
        pjs.wait_phase("l-one", "Queued")
        started = time.monotonic()
        pjs.delete("h-fill")
        pjs.wait_phase("l-one", "Running")
        print(f"light tenant's job running {time.monotonic() - started:.2f} s after 8 GPUs freed")
        assert_gang_on_record(pjs, "l-one")
        status = pjs.status("h-more")
        assert status["phase"] == "Queued", status
        assert condition(status, "Placed")["reason"] in ("Reserved", "Unschedulable"), status

        def shares() -> dict[str, Any] | None:
            got = {
                q: kube.run(pjs.custom.get_cluster_custom_object(*QUEUES, q)).get("status") or {}
                for q in (heavy, light)
            }
            return got if got[light].get("running") == 1 and got[heavy].get("waiting") == 1 else None

        got = wait_for("queue statuses", shares)
        assert got[heavy]["gpusInUse"] == 56 and got[light]["gpusInUse"] == 8
        assert got[heavy]["dominantShare"] > got[light]["dominantShare"] > 0
        metrics = pjs.operator.metrics()
        assert f'paralleljob_queue_length{{queue="{heavy}"}} 1.0' in metrics
        assert "paralleljob_fairness_jain" in metrics
        assert_no_gpu_used_twice(kube)
    finally:
        for name in (heavy, light):
            kube.run(pjs.custom.delete_cluster_custom_object(*QUEUES, name))


def test_a_queue_that_refuses_the_namespace_is_a_warning_and_the_reason(pjs: Jobs, kube: KubeSession) -> None:
    # It showed REASON Queued, "waits for room in queue research" and a Normal Accepted Event, and waited
    # forever (issue 38): only a fix ends this wait, so it is said as one.
    queue = f"research-{pjs.namespace}"[:63]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": queue}}
    kube.run(pjs.custom.create_cluster_custom_object(*QUEUES, {**body, "spec": {"namespaces": ["elsewhere"]}}))
    try:
        pjs.create("refused", 8, 1, 1, queue=queue)
        status = wait_for(
            "refused waiting with reason QueueRefused",
            lambda: (s := pjs.status("refused")).get("reason") == "QueueRefused" and s,
        )
        assert status["phase"] == "Queued" and not pjs.pods("refused")
        assert status["message"] == f"queue {queue} does not serve namespace {pjs.namespace}", status
        assert condition(status, "Placed")["reason"] == "QueueRefused"
        pjs.wait_events("refused", {"QueueRefused"})
        refused = [e for e in pjs.events("refused") if e.reason == "QueueRefused"]
        assert [e.type for e in refused] == ["Warning"], refused
    finally:
        kube.run(pjs.custom.delete_cluster_custom_object(*QUEUES, queue))


def test_a_high_priority_job_preempts_after_the_grace_period(pjs: Jobs, kube: KubeSession) -> None:
    pjs.create("low", 8, 1, 8, priority=0)  # the whole cluster
    pjs.wait_phase("low", "Running")
    restarts = pjs.status("low").get("restarts", 0)
    queued_at = pjs.status("low")["queuedAt"]
    started = time.monotonic()
    pjs.create("high", 8, 1, 2, priority=10)

    def signalled() -> dict[str, Any] | None:
        status = pjs.status("low")
        return status if condition(status, "PreemptionPending").get("status") == "True" else None

    status = wait_for("PreemptionPending on the victim", signalled, timeout_s=60)
    signalled_after = time.monotonic() - started
    deadline = status["preemption"]["deadline"]
    assert status["preemption"]["for"] == f"{pjs.namespace}/high"
    assert deadline in condition(status, "PreemptionPending")["message"]
    wait_for(
        "the checkpoint-now annotation on every victim pod",
        lambda: all(
            (p.metadata.annotations or {}).get(CHECKPOINT_REQUESTED_ANNOTATION) == deadline for p in pjs.pods("low")
        ),
        timeout_s=60,
    )
    # within the grace period the victim keeps all its pods and the high-priority job has none
    assert len(pjs.live_pods("low")) == 8 and not pjs.pods("high")
    assert pjs.status("low")["phase"] == "Running"
    assert condition(pjs.status("high"), "Placed")["reason"] == "Preempting"
    pjs.wait_phase("high", "Running", timeout_s=GRACE_S + 60)
    running_after = time.monotonic() - started
    assert running_after >= GRACE_S - 1, running_after  # never before the grace period (stamps are whole seconds)
    assert_gang_on_record(pjs, "high")
    low = pjs.wait_phase("low", "Queued")
    assert low.get("restarts", 0) == restarts and low["queuedAt"] == queued_at and "preemption" not in low
    assert condition(low, "PreemptionPending")["status"] == "False"
    pjs.wait_events("low", {"PreemptionPending", "Preempted"})
    assert not pjs.live_pods("low")
    print(f"victim signalled after {signalled_after:.2f} s; high-priority job running after {running_after:.2f} s")
    assert_no_gpu_used_twice(kube)

"""Crashed workers are replaced within seconds, every time (issue 11): the DELETE response of a failed pod,
handled after the watch's DELETED event, used to bring the pod back into the operator's store, and the
repair then waited for the next full re-list (``--relist-seconds``, 300 s by default; nothing else brings a
pod that is gone back out of the store). Eight crashes in a row; each replacement must be bound well inside
the re-list period, with a deadline a loaded machine meets. The times are recorded, not asserted: the 2 s
target is ``paralleljob bench worker-crash``'s (docs/benchmarks.md)."""

from __future__ import annotations

import time

import pytest
from pjhelpers import Jobs, OperatorProcess, assert_no_gpu_used_twice, wait_for
from tests.timings import record_time

from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

CRASHES = 8
LIMIT_S = 30.0  # a tenth of the e2e operator's re-list period (the default 300 s): a resurrected pod waits for it


def test_each_crashed_worker_is_replaced_within_seconds(pjs: Jobs) -> None:
    pjs.create("crashy", 2, 2, 1, failurePolicy={"maxRestarts": 100})
    pjs.wait_phase("crashy", "Running")
    took = []
    for i in range(CRASHES):
        victim = f"crashy-d0-p{i % 2}"
        old = next(p for p in pjs.pods("crashy") if p.metadata.name == victim)
        patch = {"metadata": {"uid": old.metadata.uid, "annotations": {"kwok.paralleljob.dev/fail-after": "0s"}}}
        pjs.kube.run(pjs.kube.core.patch_namespaced_pod(victim, pjs.namespace, patch))

        def failed_or_gone(name: str = victim, uid: str = old.metadata.uid) -> bool:
            pod = next((p for p in pjs.pods("crashy") if p.metadata.name == name), None)
            return pod is None or pod.metadata.uid != uid or pod.status.phase == "Failed"

        wait_for(f"{victim} to fail", failed_or_gone, timeout_s=30, interval=0.05)
        failed = time.monotonic()

        def replaced(name: str = victim, uid: str = old.metadata.uid) -> bool:
            return any(p.metadata.name == name and p.metadata.uid != uid and p.spec.node_name for p in pjs.pods())

        wait_for(f"a replacement for {victim}", replaced, timeout_s=2 * LIMIT_S, interval=0.05)
        took.append(record_time("worker Failed -> replacement bound", time.monotonic() - failed, 2.0,
                                "paralleljob bench worker-crash"))  # fmt: skip
        pjs.wait_phase("crashy", "Running", restarts=i + 1)
    assert max(took) < LIMIT_S, f"repair times {[round(t, 2) for t in took]} s\n{pjs.operator.log_tail()}"


def slots_held(pjs: Jobs, name: str) -> tuple[int, list[str]]:
    """How many slots of the recorded placement hold a live pod of that name on the recorded node and
    GPUs, and what is wrong with the others (read from the API only, as the chaos run's checker does)."""
    record = pjs.status(name)["placement"]["pods"]
    pods = {p.metadata.name: p for p in pjs.pods(name)}
    held, wrong = 0, []
    for slot in record:
        pod = pods.get(slot["name"])
        if pod is None:
            wrong.append(f"{slot['name']}: no pod")
        elif pod.metadata.deletion_timestamp or pod.status.phase == "Failed":
            wrong.append(f"{slot['name']}: being deleted or failed")
        elif pod.spec.node_name != slot["node"]:
            wrong.append(f"{slot['name']}: on {pod.spec.node_name or '(unbound)'}, recorded {slot['node']}")
        elif pod.metadata.annotations.get("paralleljob.dev/gpu-indices") != ",".join(map(str, slot["gpuIndices"])):
            wrong.append(f"{slot['name']}: GPUs differ from the record")
        else:
            held += 1
    return held, wrong


@pytest.mark.parametrize("crash_after", [1, 5, 10])
def test_a_full_repair_killed_during_the_re_creation_ends_whole(
    pjs: Jobs, pj_operator: OperatorProcess, chaos: KubeSession, crash_after: int
) -> None:
    """The chaos finding: a TP1xPP4xDP4 gang (full repair) lost a node; the operator re-created all 16
    pods, was killed during it, and the next one reported the gang repaired while only 10 of 16 slots had
    a bound pod. Killed after ``crash_after`` binds of the re-creation, the next operator must finish it:
    every slot held, and still held a few seconds later (nothing deleted behind the report)."""
    pjs.create("whole", 1, 4, 4, failurePolicy={"strategy": "full", "maxRestarts": 10})
    before = pjs.wait_phase("whole", "Running")
    lost = before["placement"]["pods"][0]["node"]
    pj_operator.stop()
    pj_operator.start({"PARALLELJOB_CRASH_AFTER_BINDS": str(crash_after)})
    chaos.make_node_not_ready(lost)
    # a generous bound: the stale pods on live nodes must be gone (kwok) before their names are re-created
    assert pj_operator.wait_exit(90) == 17, pj_operator.log_tail()
    pj_operator.start()
    pjs.wait_phase("whole", "Running", restarts=1, timeout_s=30)
    for _ in range(8):  # held now and for the next few seconds
        held, wrong = slots_held(pjs, "whole")
        assert held == 16 and not wrong, f"{held} of 16 slots held: {wrong}\n{pj_operator.log_tail()}"
        time.sleep(0.5)
    assert lost not in {p["node"] for p in pjs.status("whole")["placement"]["pods"]}
    assert_no_gpu_used_twice(pjs.kube)

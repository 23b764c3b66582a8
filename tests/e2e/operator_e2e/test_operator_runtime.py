"""A runtime that cannot lie, on the real API server: a dead task makes /healthz fail and the process exit
non-zero; a leader paused past its lease (SIGSTOP) never acts next to the standby that took over."""

from __future__ import annotations

import signal
import threading
import time
import urllib.error

import pytest
from pjhelpers import Jobs, OperatorProcess, assert_gang_on_record, assert_no_gpu_used_twice, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


def health(proc: OperatorProcess) -> int | None:
    """/healthz's status code; None while nothing answers."""
    try:
        return proc.healthz()[0]
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.mark.parametrize("task", ["reconciler", "pod-watch"])
def test_a_dead_task_fails_healthz_and_stops_the_process(pj_operator: OperatorProcess, task: str) -> None:
    proc = OperatorProcess(pj_operator.kubeconfig, pj_operator.log_dir, identity=f"e2e-kill-{task}")
    proc.start(extra_env={"PARALLELJOB_KILL_TASK": f"{task}:3"}, wait=False)
    try:
        wait_for("/healthz to answer", lambda: health(proc) == 200, timeout_s=20, interval=0.05)
        wait_for("/healthz to fail", lambda: health(proc) == 503, timeout_s=20, interval=0.05)
        assert proc.wait_exit(timeout_s=30) == 1
        log = proc.log_tail(200)
        assert f"the operator's task {task} was cancelled: stopping the operator" in log, log
    finally:
        proc.stop()


def test_a_paused_leader_never_acts_beside_the_new_one(
    pjs: Jobs, pj_operator: OperatorProcess, dev_cluster: DevCluster
) -> None:
    standby = OperatorProcess(pj_operator.kubeconfig, pj_operator.log_dir, identity="e2e-standby-2")
    standby.start(wait=False)
    violations: list[str] = []
    watching = threading.Event()

    def check_continuously() -> None:
        own = KubeSession(dev_cluster.kubeconfig, dev_cluster.shape)  # a session is one event loop: its own
        try:
            while not watching.is_set():
                try:
                    assert_no_gpu_used_twice(own)
                except AssertionError as exc:
                    violations.append(str(exc))
                time.sleep(0.2)
        finally:
            own.close()

    checker = threading.Thread(target=check_continuously, daemon=True)
    checker.start()
    assert pj_operator.proc is not None
    try:
        wait_for("the standby's /healthz", lambda: health(standby) == 200, timeout_s=30)
        pjs.create("before", 4, 1, 2)  # the leader places it, then freezes mid-flight
        pj_operator.proc.send_signal(signal.SIGSTOP)
        standby.wait_leader(timeout_s=90)  # took over only after the lease (15 s) stood still
        pjs.create("during", 4, 2, 1)
        pjs.wait_phase("during", "Running")
        pj_operator.proc.send_signal(signal.SIGCONT)  # wakes up believing it leads
        pjs.create("after", 2, 2, 1)
        pjs.wait_phase("after", "Running")
        assert pj_operator.wait_exit(timeout_s=30) == 1, "the old leader must step down and exit"
        assert "stepping down" in pj_operator.log_tail(300)
        pjs.wait_phase("before", "Running")
        for name in ("before", "during", "after"):
            assert_gang_on_record(pjs, name)
        time.sleep(1.0)
    finally:
        watching.set()
        checker.join(timeout=5)
        if pj_operator.proc is not None and pj_operator.proc.poll() is None:
            pj_operator.proc.send_signal(signal.SIGCONT)
        standby.stop()
        pj_operator.ensure_running()
    assert not violations, violations[:3]

"""The dev tools' ``OperatorProcess``: the argv its options build, its log files, and the process handling
(start, leadership from ``/metrics``, SIGKILL, SIGTERM) against a small stand-in that serves ``/metrics``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from paralleljob.devtools.operatorproc import OperatorExited, OperatorProcess

# Serves /metrics on the port it is given: not leading for its first half second, then leading.
STAND_IN = """
import http.server, sys, time
started = time.monotonic()
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        leader = 1.0 if time.monotonic() - started > 0.5 else 0.0
        body = f"# HELP x\\nparalleljob_leader {leader}\\nparalleljob_reconcile_passes_total 3.0\\n".encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        print("request", *args, flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Metrics).serve_forever()
"""


class StandIn(OperatorProcess):
    def __init__(self, log_dir: Path, script: str = STAND_IN) -> None:
        super().__init__(Path("kubeconfig"), log_dir, identity="stand-in", log_name="{identity}-{start}.log")
        self.script = script

    def argv(self) -> list[str]:
        return [sys.executable, "-c", self.script, str(self.port)]


def test_argv_holds_only_the_options_given(tmp_path: Path) -> None:
    plain = OperatorProcess(Path("kc"), tmp_path, log_level="WARNING").argv()
    assert plain[1:] == ["-m", "paralleljob.cli", "operator", "--kubeconfig", "kc", "--metrics-port",
                         plain[7], "--metrics-host", "127.0.0.1", "--log-level", "WARNING"]  # fmt: skip
    full = OperatorProcess(
        Path("kc"),
        tmp_path,
        identity="me",
        lease_seconds=4,
        resync_seconds=10.0,
        view_check_passes=1,
        extra_args=("--write-concurrency", "48"),
    ).argv()
    assert full[10:] == ["--lease-duration", "4", "--identity", "me", "--resync-seconds", "10",
                         "--view-check-passes", "1", "--log-level", "INFO", "--write-concurrency", "48"]  # fmt: skip
    assert "5.5" in OperatorProcess(Path("kc"), tmp_path, lease_seconds=5.5).argv()


def test_each_start_logs_to_its_own_file_and_mismatches_are_read_from_all(tmp_path: Path) -> None:
    operator = OperatorProcess(Path("kc"), tmp_path, identity="a", log_name="operator-{identity}-{start}.log")
    operator.starts = 2
    assert operator.log_path == tmp_path / "operator-a-2.log"
    (tmp_path / "operator-a-1.log").write_text("x kept cluster view differed from a rebuild: node n1\n")
    (tmp_path / "operator-b-1.log").write_text("ok\nkept cluster view differed from a rebuild: pod p\n")
    (tmp_path / "kube-scheduler.log").write_text("kept cluster view differed from a rebuild: not ours\n")
    assert operator.view_mismatches() == [
        "x kept cluster view differed from a rebuild: node n1",
        "kept cluster view differed from a rebuild: pod p",
    ]
    assert operator.log_tail() == "(no log)"


def test_start_wait_for_leadership_kill_and_stop(tmp_path: Path) -> None:
    operator = StandIn(tmp_path)
    operator.start()
    try:
        assert operator.running() and operator.log_path == tmp_path / "stand-in-1.log"
        led_at = operator.wait_leader(timeout_s=20)
        assert led_at >= operator.started_at + 0.5
        assert operator.is_leader() and operator.sample("paralleljob_reconcile_passes_total") == 3.0
        assert operator.sample("absent_metric") == 0.0
        assert operator.rss_mb() > 0 and operator.cpu_seconds() >= 0
        operator.kill()
        assert not operator.running() and operator.kills == 1 and operator.returncode == -9
        assert operator.sample("paralleljob_leader") == 0.0  # nothing answers
        operator.start()
        assert asyncio.run(operator.wait_leader_async(timeout_s=20, interval_s=0.05)) > operator.started_at
        assert (tmp_path / "stand-in-2.log").exists() and len(operator.logs()) == 2
    finally:
        operator.stop()
    assert not operator.running() and operator.kills == 1 and operator.returncode == -15


def test_an_operator_that_exits_while_waited_for_fails_the_wait_with_its_log(tmp_path: Path) -> None:
    operator = StandIn(tmp_path, "print('no kubeconfig'); raise SystemExit(3)")
    operator.start()
    with pytest.raises(OperatorExited, match=r"exited with 3:\nno kubeconfig"):
        operator.wait_leader(timeout_s=20)
    operator.start()
    with pytest.raises(RuntimeError, match="no kubeconfig"):  # the chaos run counts it as a crash
        asyncio.run(operator.wait_metric("paralleljob_leader", 1.0, timeout_s=20))


def test_settled_pass_rate_waits_for_the_idle_rate_and_gives_up_with_the_last_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared settle rule of the e2e scenarios and the chaos run: the first one-second rate at or below
    the idle rate, else (past the timeout) the busy rate the caller fails on."""
    proc = StandIn(tmp_path)
    rates = iter([86.0, 61.0, 2.0, 90.0])
    monkeypatch.setattr(proc, "pass_rate", lambda over_s=1.0: next(rates))
    assert proc.settled_pass_rate(timeout_s=60.0) == 2.0  # the loop of issue 21 calming down
    busy = iter([86.0, 61.0])
    monkeypatch.setattr(proc, "pass_rate", lambda over_s=1.0: next(busy))
    assert proc.settled_pass_rate(timeout_s=0.0) == 86.0  # never settled: the busy rate comes back


def test_pass_rate_reads_the_passes_counter(tmp_path: Path) -> None:
    proc = StandIn(tmp_path)  # its counter stands still at 3: no pass a second
    proc.start()
    try:
        proc.wait_leader(timeout_s=10)
        assert proc.pass_rate(over_s=0.2) == 0.0
    finally:
        proc.stop()

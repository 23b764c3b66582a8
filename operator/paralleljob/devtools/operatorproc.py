"""``paralleljob operator`` as a subprocess, driven from outside the way a test, a chaos run or a benchmark
needs it: the one place that starts it, reads its ``/metrics`` and ``/healthz``, waits for it to lead,
stops or SIGKILLs it, reads its CPU and memory from ``/proc`` and its log.

The argv is built from keyword options (``None`` leaves the operator's own default); each start logs to a
file of its own in ``log_dir``, named by ``log_name`` (a template with ``{identity}`` and ``{start}``). The
process dies with its parent (PR_SET_PDEATHSIG), so a killed test session or benchmark leaves no operator
behind. The shipped operator (``paralleljob.k8s``) never imports this.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from paralleljob.devcluster.process import exit_with_parent, free_loopback_ports

LEADER_METRIC = "paralleljob_leader"
PASSES_METRIC = "paralleljob_reconcile_passes_total"
# Idle, an operator passes on its resync (10-30 s in tests) plus what node and pod changes cause; the loop of
# issue 21 ran 60-90 passes a second. One second with at most this many passes counts as settled.
IDLE_PASSES_PER_S = 3.0
VIEW_MISMATCH = "kept cluster view differed from a rebuild"  # logged by the operator's view self-check
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process from ``/proc/<pid>/stat``; 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def read_samples(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Unlabelled samples of a ``/metrics`` text (0.0: absent)."""
    found = {}
    for name in names:
        match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
        found[name] = float(match.group(1)) if match else 0.0
    return found


class OperatorExited(RuntimeError):
    """The operator exited while it was waited for; the message ends with its log's last lines."""


class OperatorMetrics:
    """An operator read through its ``/metrics``, however they are reached: ``metrics()`` is the point to
    override (``OperatorProcess`` asks its loopback port; the real-node e2e asks the in-cluster leader)."""

    def metrics(self) -> str:
        """The ``/metrics`` text (raises OSError while the operator does not answer)."""
        raise NotImplementedError

    def sample(self, name: str) -> float:
        """One unlabelled sample of ``/metrics``; 0.0 while it is absent or the operator does not answer."""
        return self.samples(name)[name]

    def samples(self, *names: str) -> dict[str, float]:
        """Several unlabelled samples from one read of ``/metrics`` (with a thousand queues the page is large
        enough that rendering it often is a real cost to the operator being measured)."""
        try:
            text = self.metrics()
        except OSError:
            return dict.fromkeys(names, 0.0)
        return read_samples(text, names)

    def is_leader(self) -> bool:
        return self.sample(LEADER_METRIC) >= 1.0

    def pass_rate(self, over_s: float = 1.0) -> float:
        """Reconcile passes a second over the next ``over_s`` seconds (blocks that long)."""
        before, started = self.sample(PASSES_METRIC), time.monotonic()
        time.sleep(over_s)
        return (self.sample(PASSES_METRIC) - before) / (time.monotonic() - started)

    def settled_pass_rate(self, timeout_s: float, idle_per_s: float = IDLE_PASSES_PER_S) -> float:
        """The first one-second pass rate at most ``idle_per_s`` (the operator settled), or the last one
        measured once ``timeout_s`` has passed (it did not: the caller compares it with ``idle_per_s``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            rate = self.pass_rate()
            if rate <= idle_per_s or time.monotonic() > deadline:
                return rate


class OperatorProcess(OperatorMetrics):
    """One ``paralleljob operator`` process (restartable) with its own metrics port on 127.0.0.1.

    ``argv()`` and ``environment()`` are the points to override for an operator started differently (the
    chart's e2e runs the chart Deployment's own arguments with the chart's credentials)."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        *,
        identity: str | None = None,
        lease_seconds: float | None = None,
        resync_seconds: float | None = None,
        view_check_passes: int | None = None,
        log_level: str = "INFO",
        extra_args: tuple[str, ...] = (),
        log_name: str = "operator-{start}.log",
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.resync_seconds = resync_seconds
        self.view_check_passes = view_check_passes
        self.log_level = log_level
        self.extra_args = extra_args
        self.log_name = log_name
        self.port = free_loopback_ports(1)[0]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0
        self.started_at = 0.0  # monotonic time of the latest start

    # -- the process --------------------------------------------------------------------------------

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "paralleljob.cli", "operator", "--kubeconfig", str(self.kubeconfig),
                "--metrics-port", str(self.port), "--metrics-host", "127.0.0.1"]  # fmt: skip
        if self.lease_seconds is not None:
            argv += ["--lease-duration", f"{self.lease_seconds:g}"]
        if self.identity is not None:
            argv += ["--identity", self.identity]
        if self.resync_seconds is not None:
            argv += ["--resync-seconds", f"{self.resync_seconds:g}"]
        if self.view_check_passes is not None:  # 1: every pass compares the kept view with a rebuild
            argv += ["--view-check-passes", str(self.view_check_passes)]
        return [*argv, "--log-level", self.log_level, *self.extra_args]

    def environment(self, extra_env: dict[str, str] | None) -> dict[str, str]:
        return {**os.environ, **(extra_env or {})}

    @property
    def log_path(self) -> Path:
        """The latest start's log."""
        return self.log_dir / self.log_name.format(identity=self.identity, start=self.starts)

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        assert not self.running(), "operator already running"
        self.starts += 1
        self.started_at = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(extra_env),
                preexec_fn=exit_with_parent,
            )

    def ensure_running(self) -> None:
        if not self.running():
            self.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM (the operator releases its lease), SIGKILL if it has not exited within ``grace_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: no lease release, no cleanup, as a crashed or OOM-killed operator (counted in ``kills``)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    # -- what it reports ----------------------------------------------------------------------------

    def _get(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
            return int(response.status), str(response.read().decode())

    def metrics(self) -> str:
        """The ``/metrics`` text (raises OSError while the operator does not answer)."""
        return self._get("/metrics")[1]

    def healthz(self) -> tuple[int, str]:
        return self._get("/healthz")

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        return process_cpu_seconds(self.proc.pid)

    def rss_mb(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    # -- waiting ------------------------------------------------------------------------------------

    def _reached(self, name: str, at_least: float) -> bool:
        if not self.running():
            raise OperatorExited(f"operator exited with {self.returncode}:\n{self.log_tail()}")
        return self.sample(name) >= at_least

    def wait_leader(self, timeout_s: float = 30.0, interval_s: float = 0.1) -> float:
        """Block until this process leads; returns the monotonic time it was first seen leading."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._reached(LEADER_METRIC, 1.0):
                return time.monotonic()
            time.sleep(interval_s)
        raise TimeoutError(f"operator did not lead within {timeout_s} s:\n{self.log_tail()}")

    async def wait_metric(
        self, name: str, at_least: float, timeout_s: float = 600.0, interval_s: float = 0.05
    ) -> float:
        """Poll (without blocking the loop) until sample ``name`` reaches ``at_least``; returns the monotonic
        time it was seen."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await asyncio.to_thread(self._reached, name, at_least):
                return time.monotonic()
            await asyncio.sleep(interval_s)
        raise TimeoutError(f"{name} did not reach {at_least} within {timeout_s} s:\n{self.log_tail()}")

    async def wait_leader_async(self, timeout_s: float = 60.0, interval_s: float = 0.2) -> float:
        return await self.wait_metric(LEADER_METRIC, 1.0, timeout_s, interval_s)

    # -- its logs -----------------------------------------------------------------------------------

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_size(self) -> int:
        """Bytes in the latest start's log so far (a mark for ``log_since``)."""
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, mark: int) -> str:
        """What the latest start logged after ``mark`` (all of it if it started after the mark was taken)."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[mark:].decode(errors="replace") if mark <= len(data) else data.decode(errors="replace")

    def logs(self) -> list[Path]:
        """Every start's log in ``log_dir``, of this process and of any other named by the same template."""
        return sorted(self.log_dir.glob(self.log_name.format(identity="*", start="*")))

    def all_logs(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs())

    def view_mismatches(self) -> list[str]:
        """Self-check mismatches of the kept cluster view logged by any start (needs ``view_check_passes``)."""
        return [line for line in self.all_logs().splitlines() if VIEW_MISMATCH in line]

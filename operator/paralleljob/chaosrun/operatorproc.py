"""``paralleljob operator`` as a subprocess that a chaos run can SIGKILL and start again.

Each start logs to its own file (``operator-<n>.log`` in ``log_dir``). The process dies with its parent
(PR_SET_PDEATHSIG), so a killed run leaves no operator behind. Leadership is read from the operator's
``/metrics`` (``paralleljob_leader 1``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from paralleljob.devcluster.process import exit_with_parent, free_loopback_ports


def free_port() -> int:
    return free_loopback_ports(1)[0]


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        identity: str = "chaos-operator",
        lease_seconds: int = 4,
        resync_seconds: float = 30.0,  # the operator's default
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.resync_seconds = resync_seconds
        self.extra_args = extra_args
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"operator-{self.starts}.log"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        assert not self.running(), "operator already running"
        self.starts += 1
        argv = [
            sys.executable,
            "-m",
            "paralleljob.cli",
            "operator",
            "--kubeconfig",
            str(self.kubeconfig),
            "--metrics-port",
            str(self.port),
            "--metrics-host",
            "127.0.0.1",
            "--lease-duration",
            str(self.lease_seconds),
            "--identity",
            self.identity,
            "--resync-seconds",
            str(self.resync_seconds),
            "--log-level",
            "INFO",
            *self.extra_args,
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ), preexec_fn=exit_with_parent
            )

    def kill(self) -> None:
        """SIGKILL: no lease release, no cleanup, as a crashed or OOM-killed operator."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def is_leader(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as response:
                return "paralleljob_leader 1.0" in response.read().decode()
        except OSError:
            return False

    async def wait_leader(self, timeout_s: float = 60.0) -> float:
        """Wait until this process leads; returns the monotonic time it was first seen leading."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"operator exited:\n{self.log_tail()}")
            if await asyncio.to_thread(self.is_leader):
                return time.monotonic()
            await asyncio.sleep(0.2)
        raise TimeoutError(f"operator did not lead within {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

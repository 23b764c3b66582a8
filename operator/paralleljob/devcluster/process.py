"""Start, watch and stop the dev cluster's processes, always by PID, never by name.

Processes start in a new session so they outlive ``paralleljob dev-cluster up`` and ignore the terminal's
Ctrl-C. Each one is remembered with its start time (from /proc), so stopping a cluster days later never
signals an unrelated process that happens to have reused the PID.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, suppress
from pathlib import Path

from paralleljob.devcluster.state import ProcessRecord

# Popen objects of processes started by this Python process: waiting on them reaps the zombie and keeps
# Popen's destructor from warning that a child is still running.
_children: dict[int, subprocess.Popen[bytes]] = {}

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def free_loopback_ports(count: int) -> list[int]:
    """Distinct ports that are free on 127.0.0.1 right now (all held open together, then released)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks); None when the process is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; the fields after it are plain.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def exit_with_parent() -> None:
    """Runs in the child before exec: the kernel SIGKILLs it when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    die_with_parent: bool = False,
) -> ProcessRecord:
    """Start ``argv`` detached, appending its output to ``log_path``.

    ``die_with_parent`` ties its life to this Python process (for test sessions: a killed pytest must not
    leave an API server behind); without it the process outlives us, as ``dev-cluster up`` needs.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            close_fds=True,
            preexec_fn=exit_with_parent if die_with_parent else None,
        )
    _children[process.pid] = process
    ticks = _start_ticks(process.pid)
    return ProcessRecord(name=name, pid=process.pid, start_ticks=ticks or 0, log=str(log_path))


def is_alive(record: ProcessRecord) -> bool:
    child = _children.get(record.pid)
    if child is not None and child.poll() is not None:
        return False
    ticks = _start_ticks(record.pid)
    return ticks is not None and (record.start_ticks == 0 or ticks == record.start_ticks)


def stop(record: ProcessRecord, timeout_s: float = 10.0) -> None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL; returns once the process is gone."""
    if is_alive(record):
        _signal(record.pid, signal.SIGTERM)
        if not _wait_gone(record, timeout_s):
            _signal(record.pid, signal.SIGKILL)
            _wait_gone(record, 5.0)
    child = _children.pop(record.pid, None)
    if child is not None:
        child.wait()


def _signal(pid: int, signum: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)


def _wait_gone(record: ProcessRecord, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(record):
            return True
        time.sleep(0.05)
    return not is_alive(record)


def tail(path: Path | str, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])

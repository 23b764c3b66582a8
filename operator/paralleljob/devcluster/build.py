"""Locate the control-plane binaries in the cache, building any that are missing with Go.

Builds are atomic and resumable: each binary is linked to a temporary name in the cache folder and renamed
into place only when ``go build`` succeeds, so an interrupted build leaves nothing that looks finished, and
the Go build cache makes the retry cheap. A file lock keeps two builders (say ``make`` and a pytest
fixture) from compiling the same thing twice at once. GOMODCACHE and GOCACHE keep their defaults so a
machine's warm caches help.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from paralleljob.devcluster.versions import BINARIES, BinarySpec, binaries_dir, deploy_dir, ldflags, versions

Report = Callable[[str], None]

# A silent multi-minute step looks hung in CI logs; say something at least this often.
_PROGRESS_EVERY_S = 30.0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def missing_binaries(target: Path | None = None) -> list[str]:
    target = target or binaries_dir()
    return [spec.name for spec in BINARIES if not (target / spec.name).is_file()]


def binary_paths(target: Path | None = None) -> dict[str, Path]:
    target = target or binaries_dir()
    return {spec.name: target / spec.name for spec in BINARIES}


def ensure_binaries(report: Report = _stderr) -> dict[str, Path]:
    """Return name -> path of every binary, building the missing ones first."""
    pins = versions()
    target = binaries_dir(pins)
    if not missing_binaries(target):
        return binary_paths(target)
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go is needed to build the dev-cluster binaries and `go` is not on PATH")
    target.mkdir(parents=True, exist_ok=True)
    with (target / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for leftover in target.glob(".*.partial-*"):  # from a build that was killed
            leftover.unlink(missing_ok=True)
        todo = [spec for spec in BINARIES if not (target / spec.name).is_file()]
        started = time.monotonic()
        for spec in todo:
            _build_one(go, spec, pins[spec.name], target, report)
        if todo:
            report(f"dev-cluster binaries ready in {target} ({time.monotonic() - started:.0f} s)")
    return binary_paths(target)


def _build_one(go: str, spec: BinarySpec, version: str, target: Path, report: Report) -> None:
    module = deploy_dir() / spec.module_dir
    temporary = target / f".{spec.name}.partial-{os.getpid()}"
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-trimpath", GOTOOLCHAIN="local")
    command = [
        go, "build", "-p", "2", "-buildvcs=false", "-ldflags", ldflags(spec, version),
        "-o", str(temporary), spec.package,
    ]
    log_path = target / f"{spec.name}.build.log"
    report(f"building {spec.name} {version} with {_go_version(go)} (cold builds take minutes)...")
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=module, env=env, stdout=log, stderr=subprocess.STDOUT)
        while True:
            try:
                returncode = process.wait(timeout=_PROGRESS_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                report(f"  still building {spec.name} ({time.monotonic() - started:.0f} s)")
    elapsed = time.monotonic() - started
    if returncode != 0:
        temporary.unlink(missing_ok=True)
        raise RuntimeError(f"building {spec.name} failed (exit {returncode}):\n{log_path.read_text()[-4000:]}")
    os.replace(temporary, target / spec.name)
    log_path.unlink(missing_ok=True)  # kept only when the build failed
    report(f"built {spec.name} in {elapsed:.0f} s")


def _go_version(go: str) -> str:
    result = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    return result.stdout.strip() or "go"

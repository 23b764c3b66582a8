"""Locate the control-plane binaries (and optional controllers) in the cache, building any that are missing.

Builds are atomic and resumable: each binary is linked to a temporary name in the cache folder and renamed
into place only when ``go build`` succeeds, so an interrupted build leaves nothing that looks finished, and
the Go build cache makes the retry cheap. A file lock keeps two builders (say ``make`` and a pytest
fixture) from compiling the same thing twice at once. GOMODCACHE and GOCACHE keep their defaults so a
machine's warm caches help. An add-on (:data:`~paralleljob.devcluster.versions.ADDONS`, e.g. JobSet) is
built into a folder of its own, together with the files its module ships that the cluster applies (CRDs,
webhook and RBAC manifests), copied from the Go module cache; the binary is renamed into place last, so
its presence means the folder is complete.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from paralleljob.devcluster.versions import (
    ADDONS,
    BINARIES,
    DRA_NODE_BINARIES,
    NODE_BINARIES,
    BinarySpec,
    addon_dir,
    addon_version,
    binaries_dir,
    dra_node_binaries_dir,
    go_toolchain,
    ldflags,
    module_path,
    node_binaries_dir,
    pinned_version,
    versions,
)

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
    go = _go()
    with _build_lock(target):
        todo = [spec for spec in BINARIES if not (target / spec.name).is_file()]
        started = time.monotonic()
        for spec in todo:
            _build_one(go, spec, pins[spec.name], target, report)
        if todo:
            report(f"dev-cluster binaries ready in {target} ({time.monotonic() - started:.0f} s)")
    return binary_paths(target)


def ensure_addon(addon: str, report: Report = _stderr) -> Path:
    """Return the folder holding the add-on's binary and its module files, building it first if missing."""
    spec = ADDONS[addon]
    version = addon_version(addon)
    target = addon_dir(addon, version)
    if (target / spec.name).is_file() and not _missing_module_files(spec, target):
        return target
    go = _go()
    with _build_lock(target):
        if not (target / spec.name).is_file():  # another builder may have finished while this one waited
            _copy_module_files(go, spec, version, target)
            _build_one(go, spec, version, target, report)
        elif _missing_module_files(spec, target):  # built by a checkout that copied fewer files: no rebuild
            _copy_module_files(go, spec, version, target)
    return target


def _missing_module_files(spec: BinarySpec, target: Path) -> list[str]:
    return [relative for relative in spec.module_files if not (target / "module" / relative).is_file()]


def ensure_node_binaries(report: Report = _stderr) -> dict[str, Path]:
    """Return name -> path of the real nodes' binaries (kubelet, fakegpu, pause), building missing ones."""
    target = node_binaries_dir()
    paths = {spec.name: target / spec.name for spec in NODE_BINARIES}
    if all(path.is_file() for path in paths.values()):
        return paths
    go = _go()
    with _build_lock(target):
        for spec in NODE_BINARIES:
            if not paths[spec.name].is_file():
                version = pinned_version(module_path(spec), spec.pinned_module)
                _build_one(go, spec, version, target, report)
    return paths


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go is needed to build the dev-cluster binaries and `go` is not on PATH")
    return go


@contextmanager
def _build_lock(target: Path) -> Iterator[None]:
    target.mkdir(parents=True, exist_ok=True)
    with (target / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for leftover in target.glob("**/.*.partial-*"):  # from a build that was killed
            leftover.unlink(missing_ok=True)
        yield


def _go_env(spec: BinarySpec) -> dict[str, str]:
    return dict(os.environ, CGO_ENABLED="0", GOFLAGS="-trimpath", GOTOOLCHAIN=go_toolchain(spec))


def _copy_module_files(go: str, spec: BinarySpec, version: str, target: Path) -> None:
    """Copy ``spec.module_files`` out of the pinned module as the Go module cache holds it (downloaded and
    checked against go.sum by ``go mod download``), each through a temporary name."""
    if not spec.module_files:
        return
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{spec.pinned_module}@{version}"],
        cwd=module_path(spec), env=_go_env(spec), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"go mod download {spec.pinned_module}@{version} failed:\n{result.stdout}{result.stderr}")
    module_root = Path(json.loads(result.stdout)["Dir"])
    for relative in spec.module_files:
        destination = target / "module" / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        temporary = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
        shutil.copyfile(module_root / relative, temporary)  # plain copy: the module cache's files are read-only
        os.replace(temporary, destination)


def _build_one(go: str, spec: BinarySpec, version: str, target: Path, report: Report) -> None:
    module = module_path(spec)
    temporary = target / f".{spec.name}.partial-{os.getpid()}"
    env = _go_env(spec)
    command = [
        go,
        "build",
        "-p",
        "2",
        "-buildvcs=false",
        "-ldflags",
        ldflags(spec, version),
        "-o",
        str(temporary),
        spec.package,
    ]
    log_path = target / f"{spec.name}.build.log"
    report(f"building {spec.name} {version} with {_go_version(go, env)} (cold builds take minutes)...")
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


def _go_version(go: str, env: dict[str, str]) -> str:
    result = subprocess.run([go, "env", "GOVERSION"], env=env, capture_output=True, text=True, check=False)
    return result.stdout.strip() or "go"


def ensure_dra_node_binaries(report: Report = _stderr) -> dict[str, Path]:
    """Return name -> path of what a real node with DRA runs besides the kubelet (containerd 2.x, its runc
    shim and ctr, our fakedra plugin), building missing ones."""
    target = dra_node_binaries_dir()
    paths = {spec.name: target / spec.name for spec in DRA_NODE_BINARIES}
    if all(path.is_file() for path in paths.values()):
        return paths
    go = _go()
    with _build_lock(target):
        for spec in DRA_NODE_BINARIES:
            if not paths[spec.name].is_file():
                version = pinned_version(module_path(spec), spec.pinned_module)
                _build_one(go, spec, version, target, report)
    return paths

"""Locate Helm in the cache, building it with ``go install`` from the Go module proxy if it is missing.

Helm is pinned here (:data:`HELM_VERSION`); the binary lives in ``~/.cache/paralleljob/tools/helm-<version>/``
next to the control-plane binaries, so a version bump builds a new one instead of reusing a stale one. The
build is atomic (``go install`` into a private folder, then a rename) and serialised with a file lock, so
``make`` and a pytest fixture never build it twice at once, and an interrupted build leaves nothing that
looks finished. ``PARALLELJOB_HELM`` points at another helm binary instead (say, a system one).

Run as a script (``python -m paralleljob.packaging.helm``) it builds if needed and prints the path.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from paralleljob.devcluster.versions import cache_root

# Helm 4's go.mod asks for Go 1.26.0, which the project's toolchain (Go 1.26) accepts.
HELM_VERSION = "v4.3.1"
HELM_PACKAGE = "helm.sh/helm/v4/cmd/helm"
# Stamped into the binary the way Helm's own Makefile does it, so `helm version` names the real release.
_VERSION_VARIABLE = "helm.sh/helm/v4/internal/version.version"
_PROGRESS_EVERY_S = 30.0

Report = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def helm_dir(version: str = HELM_VERSION) -> Path:
    return cache_root() / "tools" / f"helm-{version}"


def helm_path(version: str = HELM_VERSION) -> Path:
    """Where the helm binary is (or will be): ``$PARALLELJOB_HELM`` or the cache."""
    override = os.environ.get("PARALLELJOB_HELM")
    return Path(override) if override else helm_dir(version) / "helm"


def ensure_helm(report: Report = _stderr, version: str = HELM_VERSION) -> Path:
    """Return the path of a runnable helm, building it with Go first if the cache has none."""
    path = helm_path(version)
    if path.is_file() and os.access(path, os.X_OK):
        return path
    if os.environ.get("PARALLELJOB_HELM"):
        raise RuntimeError(f"PARALLELJOB_HELM={path} is not an executable file")
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go is needed to build helm and `go` is not on PATH")
    target = path.parent
    target.mkdir(parents=True, exist_ok=True)
    with (target / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():  # another builder may have finished while this one waited for the lock
            _build(go, version, path, report)
    return path


def _build(go: str, version: str, path: Path, report: Report) -> None:
    log_path = path.parent / "helm.build.log"
    ldflags = f"-s -w -X {_VERSION_VARIABLE}={version}"
    # CGO off: a static binary that runs on any of the project's machines; GOTOOLCHAIN=local: never fetch
    # another Go toolchain behind the developer's back. GOMODCACHE/GOCACHE keep their defaults (warm caches).
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-trimpath", GOTOOLCHAIN="local")
    report(f"building helm {version} with go install (a cold build takes a few minutes)...")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".gobin-", dir=path.parent) as gobin, log_path.open("w") as log:
        env["GOBIN"] = gobin
        command = [go, "install", "-p", "2", "-ldflags", ldflags, f"{HELM_PACKAGE}@{version}"]
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=gobin)
        while True:
            try:
                returncode = process.wait(timeout=_PROGRESS_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                report(f"  still building helm ({time.monotonic() - started:.0f} s)")
        if returncode != 0:
            raise RuntimeError(f"building helm failed (exit {returncode}):\n{log_path.read_text()[-4000:]}")
        os.replace(Path(gobin) / "helm", path)
    log_path.unlink(missing_ok=True)  # kept only when the build failed
    report(f"built helm {version} in {time.monotonic() - started:.0f} s: {path}")


def helm_env(home: Path, kubeconfig: Path | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment that keeps helm's config, cache and plugin data under ``home`` (never the user's)."""
    env = dict(os.environ if base is None else base)
    env.update(
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_DATA_HOME=str(home / "data"),
    )
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def run_helm(
    args: Sequence[str], env: Mapping[str, str], timeout_s: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``helm args...``; with ``check`` a failure raises with helm's own output in the message."""
    result = subprocess.run(
        [str(ensure_helm()), *args], env=dict(env), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def main() -> int:
    try:
        print(ensure_helm())
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""kube-scheduler for the benchmark's baseline: built once from the dev cluster's kubernetes wrapper module
(same pinned version as kube-apiserver) into the same cache folder, then run against the dev cluster.

Only the benchmark uses it, so it is not part of ``paralleljob dev-cluster build``; a build takes a few
minutes on a warm Go cache (most packages are shared with kube-apiserver).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from paralleljob.devcluster.versions import (
    KUBERNETES_MODULE,
    BinarySpec,
    binaries_dir,
    go_toolchain,
    ldflags,
    module_path,
    versions,
)

SPEC = BinarySpec("kube-scheduler", KUBERNETES_MODULE, "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes")


def ensure_kube_scheduler(report: Callable[[str], None] = print) -> Path:
    target = binaries_dir() / "kube-scheduler"
    if target.is_file():
        return target
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go is needed to build kube-scheduler and `go` is not on PATH")
    version = versions()["kube-apiserver"]
    partial = target.with_name(f".kube-scheduler.partial-{os.getpid()}")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-trimpath", GOTOOLCHAIN=go_toolchain(SPEC))
    command = [
        go,
        "build",
        "-p",
        "2",
        "-buildvcs=false",
        "-ldflags",
        ldflags(SPEC, version),
        "-o",
        str(partial),
        SPEC.package,
    ]
    report(f"building kube-scheduler {version} (a few minutes on a warm Go cache)...")
    started = time.monotonic()
    log = target.with_name("kube-scheduler.build.log")
    with log.open("w") as out:
        result = subprocess.run(
            command, cwd=module_path(SPEC), env=env, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"building kube-scheduler failed:\n{log.read_text()[-3000:]}")
    os.replace(partial, target)
    report(f"built kube-scheduler in {time.monotonic() - started:.0f} s")
    return target


def scheduler_config(kubeconfig: Path, qps: float, burst: int) -> str:
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "clientConnection:\n"
        f"  kubeconfig: {kubeconfig}\n"
        f"  qps: {qps}\n"
        f"  burst: {burst}\n"
        "leaderElection:\n"
        "  leaderElect: false\n"
    )


def start_kube_scheduler(
    binary: Path, kubeconfig: Path, workdir: Path, qps: float = 50.0, burst: int = 100
) -> subprocess.Popen[bytes]:
    """Defaults (qps 50, burst 100) are kube-scheduler's own; the benchmark also runs it with the limits lifted."""
    config = workdir / f"kube-scheduler-{qps:g}.yaml"
    config.write_text(scheduler_config(kubeconfig, qps, burst))
    argv = [
        str(binary),
        f"--config={config}",
        "--secure-port=0",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "-v=1",
    ]
    # The child keeps its own copy of the descriptor; ours is closed at once, not left to the collector.
    with (workdir / f"kube-scheduler-{qps:g}.log").open("wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

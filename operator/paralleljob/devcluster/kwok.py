"""Run kwok, which plays kubelet for the fake GPU nodes: node readiness and heartbeats, pod start,
completion, failure and deletion, and NotReady chaos — all from the Stage YAMLs in
``deploy/devcluster/kwok/stages/`` (the annotations they react to are constants here).

kwok only touches nodes carrying :data:`MANAGED_ANNOTATION`, so a real node (or one a test creates without
it) is left alone.
"""

from __future__ import annotations

from pathlib import Path

from paralleljob.devcluster import process
from paralleljob.devcluster.state import ProcessRecord
from paralleljob.devcluster.versions import deploy_dir

MANAGED_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"
NOT_READY_REASON_ANNOTATION = "node-not-ready.stage.kwok.x-k8s.io/reason"
NOT_READY_MESSAGE_ANNOTATION = "node-not-ready.stage.kwok.x-k8s.io/message"
COMPLETE_AFTER_ANNOTATION = "kwok.paralleljob.dev/complete-after"
FAIL_AFTER_ANNOTATION = "kwok.paralleljob.dev/fail-after"
EXIT_CODE_ANNOTATION = "kwok.paralleljob.dev/exit-code"

# Fake pod IPs are handed out from here; large enough for thousands of workers in a demo.
POD_CIDR = "10.128.0.0/12"


def stage_files() -> list[Path]:
    stages = sorted((deploy_dir() / "kwok" / "stages").glob("*.yaml"))
    if not stages:
        raise RuntimeError(f"no kwok stages found under {deploy_dir() / 'kwok' / 'stages'}")
    return stages


def start_kwok(binary: Path, run_dir: Path, kubeconfig: Path, die_with_parent: bool = False) -> ProcessRecord:
    home = run_dir / "kwok"
    home.mkdir(parents=True, exist_ok=True)
    key, value = MANAGED_ANNOTATION
    argv = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--cidr={POD_CIDR}",
        "--node-ip=127.0.0.1",
        "--node-lease-duration-seconds=40",
    ]
    argv += [f"--config={path}" for path in stage_files()]
    # kwok also reads ~/.kwok/kwok.yaml when it exists; a private HOME keeps a user's config out.
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return process.spawn("kwok", argv, run_dir / "logs" / "kwok.log", env=env, die_with_parent=die_with_parent)

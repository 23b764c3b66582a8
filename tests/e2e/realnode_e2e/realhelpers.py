"""Helpers for the real-node e2e tests: the session's real cluster and reading what its kubelets wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from paralleljob.devcluster import hostcheck
from paralleljob.devcluster.cluster import DevCluster


@dataclass(frozen=True)
class RealCluster:
    cluster: DevCluster
    worker_image: str


def pod_log(cluster: DevCluster, namespace: str, pod: str, container: str) -> str:
    """A container's log as the kubelet wrote it (the API server cannot reach a kubelet in its namespace)."""
    found = sorted((cluster.run_dir / "nodes").glob(f"*/pod-logs/{namespace}_{pod}_*/{container}/*.log"))
    return "\n".join(Path(path).read_text(errors="replace") for path in found)


def skip_unless_real_nodes_can_run() -> None:
    problems = hostcheck.missing({**hostcheck.PROGRAMS, **hostcheck.IMAGE_PROGRAMS})  # nodes, and the images
    if problems:
        pytest.skip("real nodes cannot run here (an environment limit): " + "; ".join(problems))

"""The names a user types: every kubectl form for one ParallelJob works against the real API server.

kubectl expands a CRD category before it matches a resource name, so a category spelled like a kind's
singular used to make `kubectl get paralleljob NAME` match both kinds ("you must specify only one
resource"). This runs the real kubectl on the CRDs as shipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from paralleljob.devcluster.cluster import DevCluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is part of the CI machine's image but is not on PATH")
        pytest.skip("kubectl is not installed")
    return found


def run(cluster: DevCluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"kubectl failed: {result.stderr or result.stdout}"
    return result.stdout


def test_every_kubectl_form_names_one_paralleljob(dev_cluster: DevCluster, namespace: str) -> None:
    job = yaml.safe_load((REPO / "deploy" / "examples" / "llama-70b.yaml").read_text())
    ok(run(dev_cluster, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(job)))
    queue = {
        "apiVersion": "paralleljob.dev/v1alpha1",
        "kind": "ParallelJobQueue",
        "metadata": {"name": f"q-{namespace}"[:63]},
        "spec": {"weight": 1},
    }
    ok(run(dev_cluster, "apply", "-f", "-", stdin=yaml.safe_dump(queue)))
    try:
        for kind in ("paralleljob", "paralleljobs", "pj", "paralleljob.paralleljob.dev"):
            body = yaml.safe_load(ok(run(dev_cluster, "get", kind, "llama-70b", "-n", namespace, "-o", "yaml")))
            assert body["kind"] == "ParallelJob" and body["metadata"]["name"] == "llama-70b"
            assert body["spec"]["rankOrder"] == "tp-dp-pp"
        described = ok(run(dev_cluster, "describe", "paralleljob", "llama-70b", "-n", namespace))
        assert "Name:         llama-70b" in described and "Rank Order:" in described
        listed = ok(run(dev_cluster, "get", "paralleljobs", "-A", "-o", "name"))
        assert "paralleljob.paralleljob.dev/llama-70b" in listed
        assert "paralleljobqueue" not in listed, "listing jobs must not list queues"
        both = ok(run(dev_cluster, "get", "paralleljob-all", "-A", "-o", "name"))
        assert (
            "paralleljob.paralleljob.dev/llama-70b" in both
            and f"paralleljobqueue.paralleljob.dev/{queue['metadata']['name']}" in both
        )
        immutable = run(
            dev_cluster,
            "patch",
            "paralleljob",
            "llama-70b",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec": {"rankOrder": "tp-pp-dp"}}',
        )
        assert immutable.returncode != 0 and "rankOrder is immutable" in immutable.stderr
        ok(run(dev_cluster, "delete", "paralleljob", "llama-70b", "-n", namespace, "--wait=true"))
        gone = run(dev_cluster, "get", "paralleljob", "llama-70b", "-n", namespace)
        assert gone.returncode != 0 and "NotFound" in gone.stderr
    finally:
        run(dev_cluster, "delete", "paralleljobqueue", queue["metadata"]["name"], "--ignore-not-found")

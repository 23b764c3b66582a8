"""``paralleljob status | describe | drain | undrain`` and ``kubectl paralleljob`` on the live cluster."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
from typing import Any

import pytest
from pjhelpers import Jobs, assert_gang_on_record, wait_for

from paralleljob.cli import main
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


def cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``paralleljob ARGS`` in this process (a subprocess per call costs a second of imports), with the
    user's environment from ``env``; ``kubectl paralleljob`` below runs the installed plugin for real."""
    out, err = io.StringIO(), io.StringIO()
    saved = {key: os.environ.get(key) for key in ("KUBECONFIG", "COLUMNS")}
    os.environ.update({key: env[key] for key in saved})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    done = subprocess.CompletedProcess(["paralleljob", *args], code, out.getvalue(), err.getvalue())
    if check:
        assert done.returncode == 0, f"paralleljob {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def status_json(env: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(cli(env, "status", "-o", "json").stdout))


def test_status_describe_drain_undrain(pjs: Jobs, nodes_restored: KubeSession, cli_env: dict[str, str]) -> None:
    pjs.create("cli", 4, 2, 1)
    before = pjs.wait_phase("cli", "Running")
    key = f"{pjs.namespace}/cli"
    node = before["placement"]["pods"][0]["node"]

    gpu_map = status_json(cli_env)
    held = {(n["name"], c["index"]) for n in gpu_map["nodes"] for c in n["gpus"] if c["holder"] == key}
    assert held == {(p["node"], i) for p in before["placement"]["pods"] for i in p["gpuIndices"]}
    assert any(j["key"] == key and j["phase"] == "Running" and j["gpus"] == 8 for j in gpu_map["jobs"])
    table = cli(cli_env, "status").stdout
    assert key in table and "GPUs:" in table

    described = json.loads(cli(cli_env, "describe", "cli", "-n", pjs.namespace, "-o", "json").stdout)
    assert [p["ranks"] for p in described["pods"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert described["cost"]["totalMs"] == before["communicationCost"]["totalMs"]
    assert "Placed" in {e["reason"] for e in described["events"]}
    assert "placement by rank" in cli(cli_env, "describe", f"{pjs.namespace}/cli").stdout
    # an 80-column terminal: no line wider, and no pod name, node name or event time broken across lines
    narrow = cli({**cli_env, "COLUMNS": "80"}, "describe", key).stdout
    assert max(map(len, narrow.splitlines())) <= 80, narrow
    words = set(re.findall(r"[\w.:-]+", narrow))
    whole = {p["name"] for p in described["pods"]} | {p["node"] for p in described["pods"]}
    assert whole | {e["time"] for e in described["events"]} <= words, narrow
    missing = cli(cli_env, "describe", "nope", "-n", pjs.namespace, check=False)
    assert missing.returncode == 1 and "no ParallelJob" in missing.stderr

    # drain NODE: cordoned, every GPU out; the operator moves the job's pods away after the grace period
    # (maintenance, not a failure: no restart counted).
    out = cli(cli_env, "drain", node).stdout
    assert "cordoned" in out

    def moved() -> dict[str, Any] | None:
        status = pjs.status("cli")
        pods = (status.get("placement") or {}).get("pods") or []
        gone = status.get("phase") == "Running" and pods and node not in {p["node"] for p in pods}
        return status if gone and status.get("lastDrain") else None

    status = wait_for("the job moved off the drained node", moved, timeout_s=180)
    assert status.get("restarts", 0) == 0 and status["lastDrain"]["kind"] == "Drained"
    assert_gang_on_record(pjs, "cli")
    row = next(n for n in status_json(cli_env)["nodes"] if n["name"] == node)
    assert not row["schedulable"] and {c["state"] for c in row["gpus"]} == {"drained"}

    cli(cli_env, "undrain", node)
    row = next(n for n in status_json(cli_env)["nodes"] if n["name"] == node)
    assert row["schedulable"] and {c["state"] for c in row["gpus"]} <= {"free", "used"}
    annotations = kube_annotations(nodes_restored, node)
    assert "paralleljob.dev/unhealthy-gpus" not in annotations and "paralleljob.dev/drained-gpus" not in annotations

    # drain --gpu NODE:IDX: only that GPU, the node stays open.
    other = next(n["name"] for n in status_json(cli_env)["nodes"] if n["name"] != node)
    cli(cli_env, "drain", "--gpu", f"{other}:3", "--gpu", f"{other}:5")
    assert kube_annotations(nodes_restored, other)["paralleljob.dev/unhealthy-gpus"] == "3,5"
    row = next(n for n in status_json(cli_env)["nodes"] if n["name"] == other)
    assert row["schedulable"] and [c["index"] for c in row["gpus"] if c["state"] == "drained"] == [3, 5]
    cli(cli_env, "undrain", "--gpu", f"{other}:3", "--gpu", f"{other}:5")
    assert "paralleljob.dev/unhealthy-gpus" not in kube_annotations(nodes_restored, other)
    bad = cli(cli_env, "drain", "--gpu", f"{other}:8", check=False)
    assert bad.returncode == 2 and "has 8 GPUs" in bad.stderr


def kube_annotations(kube: KubeSession, node: str) -> dict[str, str]:
    return dict(kube.run(kube.core.read_node(node)).metadata.annotations or {})


def test_kubectl_plugin(pjs: Jobs, cli_env: dict[str, str]) -> None:
    kubectl = shutil.which("kubectl", path=cli_env["PATH"])
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    assert shutil.which("kubectl-paralleljob", path=cli_env["PATH"]), "the console script is installed with the venv"
    pjs.create("plugin", 2, 1, 1)
    pjs.wait_phase("plugin", "Running")
    done = subprocess.run(
        [kubectl, "paralleljob", "status", "-o", "json"], env=cli_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"{pjs.namespace}/plugin" in {j["key"] for j in json.loads(done.stdout)["jobs"]}
    wait_for("plugin help", lambda: "describe" in subprocess.run(
        [kubectl, "paralleljob", "--help"], env=cli_env, capture_output=True, text=True, timeout=60
    ).stdout, timeout_s=60)  # fmt: skip

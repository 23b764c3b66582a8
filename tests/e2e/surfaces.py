"""Every user-facing surface of one cluster read at once, for the surface x mode matrix (issue 38): the kubectl
printer columns and ``kubectl describe pj``, ``paralleljob status`` and ``paralleljob describe``, the web view's
JSON (its ``/api/snapshot`` and each job's ``/api/job`` panel) and the operator's ``/metrics``.

Each must answer without a crash (exit 0, no traceback), name every job, and count the same GPUs: used, free
and failed agree between ``status``, the web view and the operator's own view (its ``paralleljob_gpus``
gauges, read from the cluster view it schedules with). The matrix's modules (one per e2e suite, so each mode
runs on the cluster its suite already brings up) call :func:`check_surfaces` once their gangs are placed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paralleljob.cli import main
from paralleljob.devtools.browser import DashboardProcess
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.devtools.waiting import wait_until

GPU_METRIC = "paralleljob_gpus"


@dataclass
class Surfaces:
    """What each surface said (for the caller's own checks of its mode)."""

    status: dict[str, Any]  # ``paralleljob status -o json``
    snapshot: dict[str, Any]  # the web view's picture
    panels: dict[str, dict[str, Any]]  # job key -> its web view panel
    described: dict[str, dict[str, Any]]  # job key -> ``paralleljob describe -o json``
    metrics: dict[str, float]  # paralleljob_gpus by state
    kubectl_wide: str  # ``kubectl get pj -o wide``


def paralleljob_cli(kubeconfig: Path, *args: str, columns: int = 200) -> str:
    """``paralleljob ARGS`` in this process at a terminal ``columns`` wide (a crash is this test's traceback);
    stdout, exit 0 asserted."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*args, "--kubeconfig", str(kubeconfig)])
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    assert code == 0, f"paralleljob {' '.join(args)} exited {code}\n{out.getvalue()}\n{err.getvalue()}"
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return out.getvalue()


def kubectl(kubeconfig: Path, *args: str) -> str:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is not installed"
    done = subprocess.run(
        [binary, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def gpu_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(GPU_METRIC + "{"):
            labels, _, value = line.partition("} ")
            out[labels.split('state="')[1].rstrip('"')] = float(value)
    return out


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200, url
        return dict(json.loads(response.read()))


def _counts(totals: dict[str, Any]) -> tuple[int, int, int, int]:
    return (int(totals["total"]), int(totals["used"]), int(totals["free"]), int(totals["unhealthy"]))


def check_surfaces(
    kubeconfig: Path, operator: OperatorProcess, namespace: str, jobs: list[str], log_dir: Path
) -> Surfaces:
    """Read every surface with ``jobs`` (names in ``namespace``, each placed and Running) on the cluster and
    check they answer and agree; waits (generous deadlines) for the web view and the gauges to catch up."""
    keys = [f"{namespace}/{name}" for name in jobs]
    wide = kubectl(kubeconfig, "get", "pj", "-n", namespace, "-o", "wide")
    for name in jobs:
        row = next((line for line in wide.splitlines() if line.split()[:1] == [name]), "")
        assert "Running" in row.split(), f"kubectl get pj -o wide: no Running row for {name}:\n{wide}"
        described = kubectl(kubeconfig, "describe", "pj", "-n", namespace, name)
        assert "Placement" in described and "Phase:" in described, described

    status = json.loads(paralleljob_cli(kubeconfig, "status", "-o", "json"))
    table = paralleljob_cli(kubeconfig, "status")
    assert table.strip(), "paralleljob status printed nothing"
    described_json = {}
    for key in keys:
        paralleljob_cli(kubeconfig, "describe", key)
        described_json[key] = json.loads(paralleljob_cli(kubeconfig, "describe", key, "-o", "json"))
        assert described_json[key]["phase"] == "Running" and described_json[key]["pods"], described_json[key]
    expected = _counts(status["totals"])

    web = DashboardProcess(kubeconfig, log_dir / "dashboard.log")
    web.start()
    try:

        def caught_up() -> dict[str, Any] | None:
            shown = _get_json(web.url + "api/snapshot")
            placed = {j["key"] for j in shown["jobs"] if j["phase"] == "Running" and j["slots"]}
            return shown if _counts(shown["totals"]) == expected and set(keys) <= placed else None

        try:
            snapshot = wait_until("the web view showing what status shows", caught_up, 60.0, 0.5)
        except AssertionError as exc:
            last = _get_json(web.url + "api/snapshot")
            raise AssertionError(
                f"{exc}: web view totals {last['totals']}, status totals {status['totals']}\n{web.log_tail()}"
            ) from None
        try:
            panels = {key: _get_json(f"{web.url}api/job/{key}") for key in keys}
        except OSError as exc:
            raise AssertionError(f"the web view's job panel: {exc}\n{web.log_tail()}") from None
    finally:
        web.stop()
    assert "Traceback" not in web.log_tail(400), web.log_tail(400)
    assert snapshot["totals"] == status["totals"], (snapshot["totals"], status["totals"])
    shown_nodes = sorted(snapshot["nodes"])
    assert shown_nodes == sorted(row["name"] for row in status["nodes"]), "the same nodes on both maps"
    for row in status["nodes"]:
        assert snapshot["nodes"][row["name"]]["ready"] == row["ready"], row["name"]
    for key, panel in panels.items():
        assert panel["phase"] == "Running" and panel["pods"], panel
        bound, cost = panel["lowerBoundMs"], panel["cost"].get("totalMs")
        assert bound is None or cost is None or bound <= cost + 1e-6, f"{key}: lower bound {bound} > cost {cost}"
        slots = next(j["slots"] for j in snapshot["jobs"] if j["key"] == key)
        gpus = sorted((s["node"], g) for s in slots for g in s["gpuIndices"])
        assert gpus == sorted((p["node"], g) for p in described_json[key]["pods"] for g in p["gpu_indices"])

    # the operator's own view: its gauges, from the cluster view it schedules with
    total, used, free, failed = expected

    def gauges_agree() -> dict[str, float] | None:
        found = gpu_metrics(operator.metrics())
        agree = (found.get("total"), found.get("allocated"), found.get("free"), found.get("unhealthy")) == (
            total, used, free, failed
        )
        return found if agree else None

    try:
        metrics = wait_until("the operator's gauges agreeing with the surfaces", gauges_agree, 30.0, 0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {gpu_metrics(operator.metrics())} against {status['totals']}") from None
    return Surfaces(status, snapshot, panels, described_json, metrics, wide)


# ---- the gangs each mode runs ------------------------------------------------------------------------------
def pod_group_job(name: str, tp: int, pp: int, dp: int) -> dict[str, Any]:
    """An Indexed Job whose pods carry the pod-group label (``docs/pod-groups.md``): the operator adopts them
    with a ParallelJob of the group's name and binds them; the Job controller owns them."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": pp * dp,
            "parallelism": pp * dp,
            "template": {
                "metadata": {
                    "labels": {"paralleljob.dev/pod-group": name},
                    "annotations": {"paralleljob.dev/parallelism": f"TP{tp}xPP{pp}xDP{dp}"},
                },
                "spec": {
                    "schedulerName": "paralleljob-scheduler",
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "trainer", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": tp}}}
                    ],
                },
            },
        },
    }


def elastic_manifest(name: str, tp: int, low: int, high: int) -> dict[str, Any]:
    from pjhelpers import Jobs  # the operator suite's helpers (on sys.path in every suite using this)

    body = Jobs.manifest(name, tp, 1, high)
    body["spec"]["parallelism"].update(minData=low, maxData=high)
    return body

"""``paralleljob agent``: the clear exit without NVML, ``--once`` as JSON, bad input refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pynvml
import pytest

from paralleljob.agent.cli import EXIT_BAD_INPUT, EXIT_NO_NVML
from paralleljob.cli import main


def _no_library() -> None:
    raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def test_without_nvml_the_agent_exits_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", _no_library)
    assert main(["agent", "--node", "gpu-node-000"]) == EXIT_NO_NVML
    err = capsys.readouterr().err
    assert "NVML is not available on this machine" in err
    assert "NVML Shared Library Not Found" in err and "--fake-nvml" in err


def test_without_the_bindings_the_agent_says_which_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert main(["agent", "--once"]) == EXIT_NO_NVML
    assert "nvidia-ml-py" in capsys.readouterr().err


def test_once_prints_readings_and_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "gpu.yaml"
    script.write_text(
        "gpus: 4\n"
        "defaults: {temperature_c: 50, ecc_enabled: true, ecc_uncorrected_volatile: 0}\n"
        "steps:\n"
        "  - {poll: 0, gpu: 2, xid: 79, set: {lost: true}}\n"
        "  - {poll: 0, gpu: 1, set: {temperature_c: 93}}\n"
    )
    assert main(["agent", "--once", "--node", "n1", "--fake-nvml", str(script)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["node"] == "n1"
    assert len(report["sample"]["gpus"]) == 4 and report["xids"] == [{"gpu": 2, "xid": 79}]
    assert report["gpus"]["2"]["state"] == "Offline" and report["gpus"]["1"]["state"] == "Degraded"
    assert report["would_write"]["unhealthy-gpus"] == "2"
    assert report["would_write"]["GPUHealthy"]["status"] == "False"


def test_bad_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    script = tmp_path / "bad.yaml"
    script.write_text("gpus: 2\nsteps: [{poll: 0, gpu: 5, xid: 79}]\n")
    assert main(["agent", "--node", "n", "--fake-nvml", str(script)]) == EXIT_BAD_INPUT
    assert "steps[0].gpu" in capsys.readouterr().err
    assert main(["agent", "--fake-nvml", str(script)]) == EXIT_BAD_INPUT  # no --node, no $NODE_NAME
    assert main(["agent", "--node", "n", "--interval", "0"]) == EXIT_BAD_INPUT


def test_nvml_without_gpus_is_no_nvml(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    assert main(["agent", "--once"]) == EXIT_NO_NVML
    assert "NVML sees no GPU" in capsys.readouterr().err


def test_without_cluster_credentials_the_agent_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "gpu.yaml"
    script.write_text("gpus: 1\n")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "no-kubeconfig"
    args = ["agent", "--node", "n", "--fake-nvml", str(script), "--kubeconfig", str(missing), "--metrics-port", "0"]
    assert main(args) == 1
    assert "no cluster credentials" in capsys.readouterr().err

"""What the CLI and the operator say when they cannot start: no kubeconfig, an API server that does not
answer, a metrics port already taken. One line that says what to do, never a traceback (issue 21)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from paralleljob.cli import main
from paralleljob.k8s.runtime.api import ApiError, Kube


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig_for(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters:\n- name: c\n  cluster: {{server: '{server}'}}\n"
        "contexts:\n- name: c\n  context: {cluster: c, user: u}\n"
        "users:\n- name: u\n  user: {token: t}\n"
    )
    return path


def test_status_without_a_kubeconfig_says_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["status"]) != 0
    err = capsys.readouterr().err
    assert "--kubeconfig" in err and "KUBECONFIG" in err and "paralleljob dev-cluster kubeconfig" in err
    assert "current-context" not in err and "Config not found" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_stopped_dev_clusters_kubeconfig_says_the_cluster_is_not_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Walking the README: after the after-demo lines (export KUBECONFIG=...) and `make demo-down`, status only
    # said to pass the dev cluster's kubeconfig, the very file that was gone.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "run" / "demo" / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["status"]) != 0
    err = capsys.readouterr().err
    assert f"no kubeconfig at {tmp_path / 'run' / 'demo' / 'kubeconfig'}" in err
    assert "exists only while that cluster runs" in err and "dev-cluster status" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unreachable_api_server_is_one_line_naming_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    assert main(["status", "--kubeconfig", str(kubeconfig_for(tmp_path, server))]) != 0
    err = capsys.readouterr().err
    assert f"cannot reach the API server at {server} (connection refused)" in err
    assert "ClientConnectorError" not in err and len(err.strip().splitlines()) == 1


def test_the_operators_client_says_the_same(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{free_port()}"

    async def call() -> str:
        kube = await Kube.connect(str(kubeconfig_for(tmp_path, server)))
        try:
            await kube.request("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/x")
        except ApiError as exc:
            return str(exc)
        finally:
            await kube.close()
        return ""

    message = asyncio.run(call())
    assert f"cannot reach the API server at {server}" in message and "check that the API server is running" in message
    assert "ClientConnectorError" not in message and not message.startswith("HTTP 0")


def test_the_operator_with_its_metrics_port_taken_says_so_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = kubeconfig_for(tmp_path, f"https://127.0.0.1:{free_port()}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["operator", "--kubeconfig", str(kubeconfig), "--metrics-host", "127.0.0.1",
                     "--metrics-port", str(port)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert f"127.0.0.1:{port}" in err and "--metrics-port" in err and "Traceback" not in err


def test_the_agents_client_says_the_same(tmp_path: Path) -> None:
    from paralleljob.agent.kube import NodeApiError, NodeClient

    server = f"https://127.0.0.1:{free_port()}"

    async def call() -> str:
        nodes = await NodeClient.connect("n1", str(kubeconfig_for(tmp_path, server)))
        try:
            await nodes.get()
        except NodeApiError as exc:
            return str(exc)
        finally:
            await nodes.close()
        return ""

    message = asyncio.run(call())
    assert message.startswith(f"cannot reach the API server at {server} (connection refused)")
    assert "ClientConnectorError" not in message


def test_the_dashboard_with_the_api_server_unreachable_says_so_and_exits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It used to print "dashboard on http://..." and serve an empty page while its watches retried in silence.
    server = f"https://127.0.0.1:{free_port()}"
    kubeconfig = kubeconfig_for(tmp_path, server)
    policy = asyncio.get_event_loop_policy()
    code = main(["dashboard", "--kubeconfig", str(kubeconfig), "--port", str(free_port())])
    err = capsys.readouterr().err
    assert code == 1
    # uvloop.install() here once made every later asyncio.run of the test process run on uvloop.
    assert asyncio.get_event_loop_policy() is policy, "the dashboard changed the process-wide event loop policy"
    assert f"cannot reach the API server at {server} (connection refused)" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err

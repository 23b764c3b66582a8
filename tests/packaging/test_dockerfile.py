"""The image without a Docker engine: the Dockerfile's structure is checked as text, and its exact entry
point is run from the wheel installed into a fresh virtualenv, as the image's second stage installs it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paralleljob.devcluster.versions import repo_root

ROOT = repo_root()


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, rest = pending.partition(" ")
        out.append((keyword.upper(), rest.strip()))
        pending = ""
    return out


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def test_dockerfile_is_multi_stage_on_slim_python_311() -> None:
    instructions = _instructions()
    args = {rest.split("=", 1)[0]: rest.split("=", 1)[1] for keyword, rest in instructions if keyword == "ARG"}
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build")
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms)
    final = _final_stage()
    assert any(k == "COPY" and r.startswith("--from=build /wheels") for k, r in final), "wheels from stage 1"
    assert not any(k == "ADD" for k, _ in instructions), "ADD fetches URLs and unpacks archives; COPY is explicit"


def test_image_runs_as_a_fixed_non_root_user() -> None:
    users = [rest for keyword, rest in _final_stage() if keyword == "USER"]
    assert users, "the final stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "a numeric UID, so runAsNonRoot can be verified"
    assert gid.isdigit() and int(gid) != 0
    assert int(uid) == 65532  # the chart's runAsUser


def test_entry_point_is_the_operator() -> None:
    final = _final_stage()
    entrypoint = [json.loads(rest) for keyword, rest in final if keyword == "ENTRYPOINT"]
    cmd = [json.loads(rest) for keyword, rest in final if keyword == "CMD"]
    # Exec form (a list): signals reach the operator, which gives its Lease back on SIGTERM.
    assert entrypoint == [["paralleljob"]] and cmd == [["operator"]]


def test_image_writes_nothing_outside_tmp() -> None:
    env: dict[str, str] = {}
    for keyword, rest in _final_stage():
        if keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    for key in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TMPDIR"):
        assert env[key] == "/tmp" or env[key].startswith("/tmp/"), key


def test_dockerignore_keeps_the_context_to_the_package() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    rules = [ln for ln in lines if ln and not ln.startswith("#")]
    assert rules[0] == "*", "ignore everything, then allow what the Dockerfile copies"
    copied = {"pyproject.toml", "README.md", "operator/"}
    assert copied <= {r[1:] for r in rules if r.startswith("!")}
    for keyword, rest in _instructions():
        if keyword == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert source in {"pyproject.toml", "README.md", "operator"}, source


@pytest.mark.slow
def test_entry_points_run_from_the_installed_wheel(tmp_path: Path) -> None:
    """What the image's build does, minus Docker: the wheel built with --no-deps from the build context, the
    wheels of its k8s and agent extras beside it, an offline install into a fresh virtualenv, and the entry
    points run from there (not from this checkout)."""
    # The Docker build context: only what .dockerignore lets through (and the Dockerfile copies).
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, context / name)
    shutil.copytree(ROOT / "operator", context / "operator", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = tmp_path / "wheels"
    pip_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(context)],
        check=True,
        env=pip_env,
        timeout=300,
    )
    (wheel,) = wheels.glob("paralleljob-*.whl")
    # The Dockerfile's two steps: wheels of every dependency next to ours, then an offline install.
    _from_the_index(
        [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), f"{wheel}[k8s,agent]"], pip_env
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    offline = ["--no-index", "--find-links", str(wheels)]
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", *offline, "paralleljob[k8s,agent]"],
        check=True, env=pip_env, timeout=600,
    )  # fmt: skip
    # Run from an empty folder with a read-only-ish environment: nothing may come from this checkout.
    run_env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import paralleljob, kubernetes_asyncio; print(paralleljob.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=run_env,
        timeout=60,
    )
    assert str(venv) in where.stdout, where.stdout
    for command in (["paralleljob", "operator", "--help"], ["kubectl-paralleljob", "--help"]):
        result = subprocess.run(
            [str(venv / "bin" / command[0]), *command[1:]],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=run_env,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "usage:" in result.stdout
    help_text = subprocess.run(
        [str(venv / "bin" / "paralleljob"), "operator", "--help"],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=tmp_path,
        timeout=60,
        check=True,
    ).stdout
    for flag in ("--topology-config", "--lease-namespace", "--identity", "--metrics-port"):
        assert flag in help_text  # the flags the chart's Deployment passes


def _from_the_index(command: list[str], env: dict[str, str], attempts: int = 3) -> None:
    """Run a pip command that reads the package index, again when it fails: CI once saw pip crash inside its
    resolver while reading the index (an exception, not a resolution error), and the registry's bad minute is
    not what this test checks. The last attempt's output is in the failure."""
    for attempt in range(1, attempts + 1):
        done = subprocess.run(command, env=env, timeout=600, capture_output=True, text=True)
        if done.returncode == 0:
            return
        if attempt == attempts:
            raise AssertionError(f"{command} failed {attempts} times; last output:\n{done.stdout}\n{done.stderr}")
        time.sleep(10 * attempt)

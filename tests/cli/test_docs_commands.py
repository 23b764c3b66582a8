"""The commands the README gives for after `make demo` reach the demo's cluster and namespace (issue 21:
they used the default cluster and namespace, so a new user saw nothing)."""

from __future__ import annotations

import re
from pathlib import Path

from paralleljob.devtools.demo_cluster import CLUSTER, NAMESPACE

ROOT = Path(__file__).parents[2]


def after_demo_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("`make demo` starts", 1)[1].split("## ", 1)[0]
    return [line.split("#")[0].strip() for line in re.findall(r"```sh\n(.*?)```", section, re.S)[0].splitlines()]


def test_the_readme_after_demo_commands_name_the_demo_cluster_and_namespace() -> None:
    commands = [c for c in after_demo_commands() if c]
    assert commands
    for command in commands:
        if "dev-cluster kubeconfig" in command:
            assert f"--name {CLUSTER}" in command, command
        if command.startswith("kubectl ") or " describe " in command:
            assert f"-n {NAMESPACE}" in command, command


def test_the_rank_check_steps_create_what_the_job_needs_before_applying_it() -> None:
    # Issue 21: docs/operator.md applied rank-check.yaml into namespaces rc1/rc2 that nothing created, without
    # the ConfigMap its pods mount, and ran kubectl against whatever cluster KUBECONFIG named.
    import yaml

    doc = (ROOT / "docs" / "operator.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", doc, re.S) if "rank-check.yaml" in b)
    job = yaml.safe_load((ROOT / "deploy" / "examples" / "train" / "rank-check.yaml").read_text())
    (configmap,) = [v["configMap"]["name"] for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    applied = block.index("kubectl apply")
    assert -1 < block.find("kubectl create namespace") < applied
    assert -1 < block.find(f"kubectl create configmap {configmap}") < applied
    assert -1 < block.find('export KUBECONFIG="$(paralleljob dev-cluster kubeconfig --name rankcheck)"') < applied


def test_the_operator_usage_in_the_docs_lists_every_flag() -> None:
    # Walking docs/operator.md: its usage block had lost --queue-policy, --dra-driver and six more.
    from paralleljob.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    flags = {o for a in commands.choices["operator"]._actions for o in a.option_strings if o.startswith("--")}
    doc = (ROOT / "docs" / "operator.md").read_text()
    usage = next(b for b in re.findall(r"```sh\n(.*?)```", doc, re.S) if b.startswith("paralleljob operator"))
    assert sorted(f for f in flags - {"--help"} if f not in usage) == []


def test_the_local_launchers_say_what_to_install_when_torchrun_is_missing(tmp_path: Path) -> None:
    # Walking docs/operator.md's rank-check steps without PyTorch ended in Popen's FileNotFoundError traceback.
    import json
    import subprocess
    import sys

    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"items": []}))
    train = ROOT / "deploy" / "examples" / "train"
    for argv in (
        [str(train / "run_local.py"), str(pods), "--torchrun", "venv/bin/torchrun"],
        [str(train / "run_elastic_local.py"), "--torchrun", "venv/bin/torchrun"],
    ):
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "no torchrun at 'venv/bin/torchrun'" in done.stderr, done.stderr
        assert "pip install torch" in done.stderr and done.stderr.count("\n") == 1, done.stderr

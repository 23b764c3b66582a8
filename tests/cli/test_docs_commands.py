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

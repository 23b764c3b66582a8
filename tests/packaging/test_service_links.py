"""No setting of ours can be shadowed by a Kubernetes service link.

The README's ``helm install paralleljob ...`` made a Service ``paralleljob-metrics``; the kubelet then set
``PARALLELJOB_METRICS_PORT=tcp://<ip>:8080`` in every pod of the namespace, the operator read it as its
``--metrics-port`` default and crash-looped. Here: the commands parse with every variable the chart's
Services make in their environment, no environment variable any of our modules reads has a service link's
shape (whatever the Service is called), and the chart turns service links off and declares every ``$(VAR)``
its containers' arguments use.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import paralleljob
from paralleljob.cli import build_parser
from paralleljob.packaging.chart import chart_dir
from paralleljob.packaging.helm import run_helm
from paralleljob.packaging.servicelinks import could_be_link_variable, link_variables

# The README's release name: the chart's fullname is then just "paralleljob", so its Services are
# paralleljob-metrics and paralleljob-web, whose links start PARALLELJOB_.
README_RELEASE = "paralleljob"
EVERYTHING_ON = ("webView.enabled=true", "agent.enabled=true", "metrics.service.enabled=true")
SHIPPED = "paralleljob"  # the package the image installs: every module of it may run in a pod
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def environment_names_read(package_dir: Path) -> dict[str, set[str]]:
    """Every upper-case string literal in an expression that reads ``os.environ`` or ``os.getenv``, by name
    (with the files it is in). The whole expression counts, so more than the names really read (a default
    beside a lookup, a tuple the lookups loop over) and every name given as a literal where it is read."""
    found: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")):
                continue
            outermost: ast.AST = node
            while isinstance(parents.get(outermost), (ast.expr, ast.keyword, ast.comprehension, ast.arguments)):
                outermost = parents[outermost]
            for inner in ast.walk(outermost):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and _ENV_NAME.match(inner.value):
                    found.setdefault(inner.value, set()).add(str(path.relative_to(package_dir.parent)))
    return found


def test_the_scan_finds_the_variables_the_commands_really_read() -> None:
    names = environment_names_read(Path(paralleljob.__file__).parent)
    # the downward API names the chart sets, the DRA defaults (docs/dra.md), the kubeconfig, the test hooks
    for name in ("POD_NAME", "POD_NAMESPACE", "NODE_NAME", "KUBECONFIG", "PARALLELJOB_DRA_DRIVER",
                 "PARALLELJOB_LOG_LEVEL", "PARALLELJOB_CRASH_AFTER_BINDS", "HTTPS_PROXY"):  # fmt: skip
        assert name in names, f"the scan missed {name}: it would miss a shadowable one too"


def test_no_variable_we_read_can_be_set_by_a_service_link() -> None:
    names = environment_names_read(Path(paralleljob.__file__).parent)
    shadowable = {name: sorted(where) for name, where in names.items() if could_be_link_variable(name)}
    assert shadowable == {}, "a Service of that name would set these in every pod of its namespace"


def test_the_link_shape_is_what_the_kubelet_makes() -> None:
    service = {
        "metadata": {"name": "paralleljob-metrics"},
        "spec": {"clusterIP": "10.96.101.16", "ports": [{"name": "metrics", "port": 8080, "protocol": "TCP"}]},
    }
    made = link_variables(service)
    assert made["PARALLELJOB_METRICS_PORT"] == "tcp://10.96.101.16:8080"
    assert made["PARALLELJOB_METRICS_SERVICE_PORT_METRICS"] == "8080"
    assert made["PARALLELJOB_METRICS_PORT_8080_TCP_ADDR"] == "10.96.101.16"
    assert all(could_be_link_variable(name) for name in made)
    headless = {"metadata": {"name": "job"}, "spec": {"clusterIP": "None", "ports": [{"port": 29500}]}}
    assert link_variables(headless) == {}
    for ours in ("PARALLELJOB_DRA_DRIVER", "POD_NAME", "KUBECONFIG", "PARALLELJOB_LOG_LEVEL"):
        assert not could_be_link_variable(ours)


# What `helm install paralleljob charts/paralleljob --set webView.enabled=true` puts into the namespace, and
# Services a user would plausibly name after the agent's metrics and the web view.
CHART_LINKS = {
    **link_variables(
        {"metadata": {"name": "paralleljob-metrics"}, "spec": {"ports": [{"name": "metrics", "port": 8080}]}}
    ),
    **link_variables({"metadata": {"name": "paralleljob-web"}, "spec": {"ports": [{"name": "http", "port": 8090}]}}),
    **link_variables({"metadata": {"name": "paralleljob-agent-metrics"}, "spec": {"ports": [{"port": 9410}]}}),
    **link_variables({"metadata": {"name": "paralleljob-dashboard"}, "spec": {"ports": [{"port": 8091}]}}),
}


@pytest.mark.parametrize(
    ("argv", "setting", "default"),
    [
        (["operator"], "metrics_port", 8080),
        (["agent", "--node=n"], "metrics_port", 9410),
        (["dashboard"], "port", 8090),
    ],
)
def test_commands_parse_beside_the_charts_service_links(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], setting: str, default: int
) -> None:
    for name, value in CHART_LINKS.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(argv)
    assert getattr(args, setting) == default


def _rendered(helm: dict[str, str]) -> list[dict[str, Any]]:
    args = ["template", README_RELEASE, str(chart_dir()), "--namespace", "paralleljob-system"]
    for value in EVERYTHING_ON:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(run_helm(args, helm).stdout) if doc]


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")
    }


def test_the_charts_pods_get_no_service_links_and_declare_what_their_args_expand(helm: dict[str, str]) -> None:
    objects = _rendered(helm)
    services = [o["metadata"]["name"] for o in objects if o["kind"] == "Service"]
    assert {"paralleljob-metrics", "paralleljob-web"} <= set(services), services
    links = {name for o in objects if o["kind"] == "Service" for name in link_variables(o)}
    assert "PARALLELJOB_METRICS_PORT" in links  # the one that crash-looped the operator
    pods = _pod_specs(objects)
    assert len(pods) == 3, sorted(pods)  # operator, web view, agent
    for where, spec in pods.items():
        # defence in depth: even a program that read one would find nothing in its pod
        assert spec.get("enableServiceLinks") is False, where
        for container in spec["containers"]:
            declared = {e["name"] for e in container.get("env") or []}
            expanded = {m for a in container.get("args") or [] for m in re.findall(r"\$\(([A-Za-z0-9_]+)\)", a)}
            # a $(VAR) the container does not declare would be filled from whatever the pod's environment
            # holds (a service link among them), or left as is
            assert expanded <= declared, (where, expanded - declared)
            assert not {n for n in declared | expanded if could_be_link_variable(n)}, where

"""The chart's observability parts, offline: the web view's Deployment runs the real `paralleljob dashboard`
command with read-only RBAC, the Grafana dashboards become labelled ConfigMaps of valid dashboard JSON, and the
PrometheusRule carries the thresholds from values. (Their queries are evaluated by a real Prometheus in
tests/e2e/operator_e2e/test_prometheus_dashboards.py.)"""

from __future__ import annotations

import json

from paralleljob.cli import build_parser
from paralleljob.packaging.chart import chart_dir
from tests.packaging.conftest import Render
from tests.packaging.objects import by_kind, one

READ_VERBS = {"get", "list", "watch"}


def test_nothing_of_it_renders_by_default(render: Render) -> None:
    objects = render()
    assert not by_kind(objects, "PrometheusRule")
    assert not [o for o in objects if o["metadata"]["name"].endswith("-web")]
    assert not [o for o in by_kind(objects, "ConfigMap") if "-dashboard-" in o["metadata"]["name"]]


def test_web_view_runs_the_dashboard_command_and_may_only_read(render: Render) -> None:
    objects = render("webView.enabled=true", "webView.port=9000")
    deployment = one(objects, "Deployment", "-web")
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    parsed = build_parser().parse_args(container["args"])
    assert parsed.command == "dashboard" and parsed.port == 9000 and parsed.host == "0.0.0.0"
    assert str(parsed.topology_config) == "/etc/paralleljob/topology.yaml"
    topology = next(v for v in spec["volumes"] if v["name"] == "topology")["configMap"]["name"]
    assert topology in {o["metadata"]["name"] for o in by_kind(objects, "ConfigMap")}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["serviceAccountName"] == "pj-paralleljob-web"
    role = one(objects, "ClusterRole", "-web")
    assert all(set(rule["verbs"]) <= READ_VERBS for rule in role["rules"]), role["rules"]
    assert one(objects, "ClusterRoleBinding", "-web")["subjects"][0]["name"] == "pj-paralleljob-web"
    service = one(objects, "Service", "-web")
    assert service["spec"]["ports"][0]["port"] == 9000
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_dashboards_are_labelled_configmaps_of_every_file(render: Render) -> None:
    files = sorted(p.stem for p in (chart_dir() / "dashboards").glob("*.json"))
    assert files == ["agent", "cluster", "jobs", "operator"]
    maps = [o for o in render("grafana.dashboards.enabled=true", "grafana.dashboards.namespace=monitoring")
            if o["kind"] == "ConfigMap" and "-dashboard-" in o["metadata"]["name"]]
    assert len(maps) == len(files)
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "monitoring"
        ((key, text),) = cm["data"].items()
        board = json.loads(text)
        name = key.removeprefix("paralleljob-").removesuffix(".json")
        assert board == json.loads((chart_dir() / "dashboards" / f"{name}.json").read_text())
        assert board["uid"] == f"paralleljob-{name}" and board["panels"]
        for panel in board["panels"]:
            assert panel["targets"] and all(t["expr"] and "$" not in t["expr"] for t in panel["targets"]), panel


def test_alert_thresholds_come_from_values(render: Render) -> None:
    rule = one(render("alerts.enabled=true", "alerts.gangsWaitingFor=45m", "alerts.gpuFailuresPerHour=9",
                      "alerts.labels.team=gpu"), "PrometheusRule")
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(rules) == {
        "ParallelJobOperatorNotLeading", "ParallelJobOperatorUnhealthy", "ParallelJobPassesSlow",
        "ParallelJobGangsWaiting", "ParallelJobGPUsFailing", "ParallelJobRepairsFailing", "ParallelJobAgentXidStorm",
    }
    assert rules["ParallelJobGangsWaiting"]["for"] == "45m"
    assert rules["ParallelJobGPUsFailing"]["expr"].endswith("> 9")
    assert all(r["labels"]["team"] == "gpu" and r["labels"]["severity"] for r in rules.values())
    assert "{{ $labels.queue }}" in rules["ParallelJobGangsWaiting"]["annotations"]["summary"]

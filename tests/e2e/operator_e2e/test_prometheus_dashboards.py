"""The chart's Grafana dashboards and alerting rules against a real Prometheus (Debian's package): it scrapes
the operator and a health agent on fake NVML; every panel query and every alert expression is evaluated
through Prometheus' HTTP API and must parse, and those this scenario exercises must return data;
``promtool check rules`` passes on the rules exactly as the chart renders them; and a gang that cannot be
placed drives ``ParallelJobGangsWaiting`` to firing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pjhelpers import Jobs, OperatorProcess, free_port, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.process import exit_with_parent
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools import systools
from paralleljob.packaging.helm import helm_env, run_helm

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "paralleljob"
WAITING_FOR = "3s"
# Panel queries with no data in this scenario, and why (any other empty one fails the test).
EMPTY_HERE = {
    "sum by (field) (increase(paralleljob_status_fields_dropped_total[1h]))": "the CRDs are current: none dropped",
    "sum by (instance, type) (paralleljob_agent_ecc_errors)": "the fake GPUs report no ECC counters",
}


class Prometheus:
    def __init__(self, workdir: Path, targets: dict[str, int], rules: Path) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                for job, port in targets.items()
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        argv = [
            "prometheus", f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, preexec_fn=exit_with_parent)
        wait_for("Prometheus ready", lambda: self._ok("/-/ready"), timeout_s=30)

    def _ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:  # a query that does not parse: 400 with the error in the body
            return json.loads(exc.read())

    def query(self, expr: str) -> Any:
        return self.api("query", query=expr)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Agent:
    """``paralleljob agent`` on fake NVML for one node: a harmless XID 13 on one GPU (the application's)."""

    def __init__(self, cluster: DevCluster, node: str, workdir: Path) -> None:
        self.port = free_port()
        script = workdir / "nvml.yaml"
        script.write_text("gpus: 8\nsteps:\n  - {poll: 2, gpu: 3, xid: 13}\n")
        argv = [
            sys.executable, "-m", "paralleljob.cli", "agent", "--node", node, "--fake-nvml", str(script),
            "--kubeconfig", str(cluster.kubeconfig), "--interval", "0.2",
            "--metrics-port", str(self.port), "--metrics-host", "127.0.0.1",
        ]  # fmt: skip
        with (workdir / "agent.log").open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, preexec_fn=exit_with_parent)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def rendered_rules(workdir: Path) -> Path:
    """The PrometheusRule's spec as the chart renders it, with the waiting threshold short enough to test."""
    out = run_helm(
        ["template", "t", str(CHART), "--set", "alerts.enabled=true", "--set", f"alerts.gangsWaitingFor={WAITING_FOR}",
         "--show-only", "templates/prometheusrule.yaml"],
        helm_env(workdir / "helm"),
    ).stdout  # fmt: skip
    rules = workdir / "rules.yaml"
    rules.write_text(yaml.safe_dump(yaml.safe_load(out)["spec"]))
    return rules


def panel_queries() -> dict[str, str]:
    """expr -> 'dashboard / panel' for every target of every dashboard in the chart."""
    out = {}
    for path in sorted((CHART / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                out[target["expr"]] = f"{board['title']} / {panel['title']}"
    return out


@pytest.fixture(scope="module")
def prometheus_bin() -> None:
    reason = systools.ensure(systools.PROMETHEUS)
    if reason:
        pytest.skip(f"no Prometheus: {reason}")


@pytest.fixture
def stack(
    prometheus_bin: None, pj_operator: OperatorProcess, dev_cluster: DevCluster, kube: KubeSession, tmp_path: Path
) -> Iterator[tuple[Prometheus, Path, str]]:
    rules = rendered_rules(tmp_path)
    node = sorted(n.metadata.name for n in kube.run(kube.core.list_node()).items)[-1]
    agent = Agent(dev_cluster, node, tmp_path)
    prom = Prometheus(tmp_path, {"paralleljob-operator": pj_operator.port, "paralleljob-agent": agent.port}, rules)
    try:
        yield prom, rules, node
    finally:
        prom.stop()
        agent.stop()
        patch = {"metadata": {"annotations": {"paralleljob.dev/gpu-health": None}}}
        kube.run(kube.core.patch_node(node, patch))


def test_dashboards_and_alerts_on_a_real_prometheus(
    pjs: Jobs, chaos: KubeSession, stack: tuple[Prometheus, Path, str]
) -> None:
    prom, rules, agent_node = stack
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout

    # A leftover pod holding the name of fill's first pod: the operator's create gets 409 AlreadyExists
    # (the API errors panel) until it is deleted; then a running gang, one that cannot be placed (the
    # alert), and a node failure repaired (failure panels).
    squatter = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fill-d0-p0"},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip
    chaos.run(chaos.core.create_namespaced_pod(pjs.namespace, squatter))
    pjs.create("fill", 8, 2, 2, failurePolicy={"strategy": "minimal"})
    conflicts = 'paralleljob_api_requests_total{verb="create",resource="pods",code="409"}'
    wait_for("the operator's pod create refused with 409", lambda: prom.query(conflicts)["data"]["result"], 30, 0.5)
    chaos.run(chaos.core.delete_namespaced_pod("fill-d0-p0", pjs.namespace, grace_period_seconds=0))
    placed = pjs.wait_phase("fill", "Running")
    pjs.create("waits", 8, 4, 2)
    pjs.wait_phase("waits", "Queued")
    victim = next(p["node"] for p in placed["placement"]["pods"] if p["node"] != agent_node)
    chaos.make_node_not_ready(victim)
    pjs.wait_phase("fill", "Running", restarts=1)

    def firing() -> Any:
        alerts = prom.api("alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "ParallelJobGangsWaiting" and a["state"] == "firing"]

    (alert,) = wait_for("ParallelJobGangsWaiting firing", firing, timeout_s=30, interval=0.5)
    assert alert["labels"]["queue"] == "default" and alert["labels"]["severity"] == "warning"
    targets = prom.api("targets")["data"]["activeTargets"]
    health = {t["labels"]["job"]: t["health"] for t in targets}
    assert health == {"paralleljob-operator": "up", "paralleljob-agent": "up"}
    wait_for("the agent's XID scraped", lambda: prom.query("paralleljob_agent_xid_total")["data"]["result"], 15, 0.5)
    time.sleep(2)  # two more scrapes after the repair, so rates over the windows see it
    # the new metrics with the values this scenario implies
    (waited,) = prom.query('paralleljob_queue_wait_seconds_count{queue="default"}')["data"]["result"]
    assert float(waited["value"][1]) >= 1  # fill was admitted (after waiting on its pod name)
    longest = 'time() - min by (queue) (paralleljob_queue_oldest_queued_timestamp_seconds{queue="default"})'
    (oldest,) = prom.query(longest)["data"]["result"]
    assert float(oldest["value"][1]) >= 3, pjs.status("waits")  # "waits" waited 3 s before the alert fired
    levels = {r["metric"]["level"] for r in prom.query("paralleljob_level_fragmentation_ratio")["data"]["result"]}
    assert levels == {"node", "leaf", "spine", "zone"}, levels  # the dev cluster's levels below the cluster

    problems, empty = [], set()
    for expr, where in panel_queries().items():
        answer = prom.query(expr)
        if answer["status"] != "success":
            problems.append(f"{where}: {expr!r} does not evaluate: {answer.get('error')}")
        elif not answer["data"]["result"]:
            empty.add(expr)
    for group in yaml.safe_load(rules.read_text())["groups"]:
        for rule in group["rules"]:
            answer = prom.query(rule["expr"])
            if answer["status"] != "success":
                problems.append(f"alert {rule['alert']}: {rule['expr']!r} does not evaluate: {answer.get('error')}")
    assert problems == []
    assert empty == set(EMPTY_HERE), f"panels without data: {sorted(empty - set(EMPTY_HERE))}"
    # every rule loaded and evaluated by Prometheus itself, with no evaluation error
    loaded = [r for g in prom.api("rules")["data"]["groups"] for r in g["rules"]]
    assert len(loaded) == sum(len(g["rules"]) for g in yaml.safe_load(rules.read_text())["groups"])
    assert [r["name"] for r in loaded if r.get("health") != "ok"] == []
    pjs.delete("waits")

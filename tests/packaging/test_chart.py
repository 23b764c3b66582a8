"""The Helm chart, offline: lint, what renders when, least-privilege RBAC, the Deployment's hardening, and
that every value reaches the operator through a flag or file it really reads."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from paralleljob.cli import build_parser
from paralleljob.k8s.edge.config import DEFAULT_WRITE_CONCURRENCY, TopologyConfig, topology_from_mapping
from paralleljob.packaging.chart import chart_dir, crd_drift
from paralleljob.packaging.helm import ensure_helm
from tests.packaging.conftest import Render
from tests.packaging.objects import CLUSTER_RULES, OPERATOR_RULES, WORKLOAD_RULES, by_kind, flatten_rules, merged, one


def _lint(helm: dict[str, str], *sets: str) -> str:
    args = [str(ensure_helm()), "lint", "--strict", str(chart_dir())]
    for value in sets:
        args += ["--set", value]
    result = subprocess.run(args, env=helm, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("agent.enabled=true", "metrics.serviceMonitor.enabled=true", "queues[0].name=research", "queues[0].maxGPUs=8"),
        ("operator.namespaces={team-a,team-b}", "operator.strictFifo=false", "rbac.create=false"),
        ("webView.enabled=true", "grafana.dashboards.enabled=true", "alerts.enabled=true"),
    ],
)
def test_helm_lint_is_clean(helm: dict[str, str], sets: tuple[str, ...]) -> None:
    out = _lint(helm, *sets)
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


def test_chart_crds_are_a_copy_of_crds_folder() -> None:
    assert crd_drift() == [], "run `make chart-crds` to refresh charts/paralleljob/crds/"


def test_defaults_render_the_operator_and_nothing_optional(render: Render) -> None:
    objects = render()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ConfigMap",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
            "FlowSchema",
        ]
    )
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "FlowSchema"):
            assert obj["metadata"]["namespace"] == "pj-system", obj["kind"]


def test_lease_requests_get_the_leader_election_priority_level_and_nothing_else(render: Render) -> None:
    flow = one(render(), "FlowSchema")
    assert flow["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    spec = flow["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": "leader-election"}
    assert spec["matchingPrecedence"] < 9000, "after service-accounts (9000) it would never match"
    [rule] = spec["rules"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": "pj-paralleljob", "namespace": "pj-system"}}
    ]
    assert rule["resourceRules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "namespaces": ["pj-system"],
            "verbs": ["get", "create", "update"],
        }
    ]
    assert "nonResourceRules" not in rule
    assert not by_kind(render("operator.leaderElection.flowSchema=false"), "FlowSchema")


VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def test_optional_parts_render_only_when_enabled(render: Render) -> None:
    assert not by_kind(render("agent.enabled=true"), "ValidatingAdmissionPolicy"), "only where the API serves it"
    objects = render("agent.enabled=true", "metrics.serviceMonitor.enabled=true", api_versions=[VAP])
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    daemonset = one(objects, "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "pj-paralleljob-agent"
    assert one(objects, "ClusterRole", "-agent")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["devicetaintrules"],
            "verbs": ["list", "create", "update", "delete"],
        },
    ]
    no_dra = render("agent.enabled=true", "dra.driver=")
    assert all(r["apiGroups"] == [""] for r in one(no_dra, "ClusterRole", "-agent")["rules"])
    for suffix in ("-own-node", "-own-devices"):  # its Node, and on DRA nodes its DeviceTaintRules
        policy = one(objects, "ValidatingAdmissionPolicy", suffix)
        assert (
            "system:serviceaccount:pj-system:pj-paralleljob-agent" in policy["spec"]["matchConditions"][0]["expression"]
        )
        assert one(objects, "ValidatingAdmissionPolicyBinding", suffix)["spec"]["policyName"].endswith(suffix)
    without_policy = render("agent.enabled=true", "agent.ownNodePolicy=false", api_versions=[VAP])
    assert not by_kind(without_policy, "ValidatingAdmissionPolicy")
    without_dra = render("agent.enabled=true", "dra.driver=", api_versions=[VAP])
    assert [p["metadata"]["name"] for p in by_kind(without_dra, "ValidatingAdmissionPolicy")] == [
        "pj-paralleljob-agent-own-node"
    ]


def test_service_monitor_needs_the_service(helm: dict[str, str]) -> None:
    args = [
        str(ensure_helm()),
        "template",
        "pj",
        str(chart_dir()),
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.service.enabled=false",
    ]
    result = subprocess.run(args, env=helm, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode != 0 and "needs metrics.service.enabled" in result.stderr


def test_operator_rbac_is_exactly_what_the_operator_calls(render: Render) -> None:
    objects = render()
    cluster_role = one(objects, "ClusterRole")
    granted = flatten_rules(cluster_role["rules"])
    assert granted == OPERATOR_RULES
    for rule in cluster_role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == "pj-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["paralleljob-operator"],
            "verbs": ["get", "update"],
        },
    ]
    for binding in (one(objects, "ClusterRoleBinding"), one(objects, "RoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pj-paralleljob", "namespace": "pj-system"}]
    assert not by_kind(render("rbac.create=false"), "ClusterRole")


def test_dra_values_reach_the_operator_and_an_empty_driver_drops_its_rbac(render: Render) -> None:
    defaults = build_parser().parse_args(_operator_args(render))
    assert (defaults.dra_driver, defaults.dra_device_class) == ("gpu.nvidia.com", "gpu.nvidia.com")
    custom = build_parser().parse_args(_operator_args(render, "dra.driver=gpu.example.com", "dra.deviceClass=big"))
    assert (custom.dra_driver, custom.dra_device_class) == ("gpu.example.com", "big")
    off = render("dra.driver=")
    assert build_parser().parse_args(_operator_args(render, "dra.driver=")).dra_driver == ""
    granted = flatten_rules(one(off, "ClusterRole")["rules"])
    assert not [key for key in granted if key[0] == "resource.k8s.io"]


def test_watching_some_namespaces_moves_the_writes_into_their_roles(render: Render) -> None:
    objects = render("operator.namespaces={team-a,team-b}")
    cluster_role = one(objects, "ClusterRole")
    # Only reads stay cluster-wide: ParallelJobs are listed and watched per served namespace, so
    # Namespaces themselves are never read.
    assert flatten_rules(cluster_role["rules"]) == merged(CLUSTER_RULES)
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in by_kind(objects, "Role")}
    for namespace in ("team-a", "team-b"):
        assert flatten_rules(roles[(namespace, "pj-paralleljob")]["rules"]) == merged(WORKLOAD_RULES)
    # Events about Nodes are posted in default.
    assert flatten_rules(roles[("default", "pj-paralleljob-node-events")]["rules"]) == {("", "events"): {"create"}}
    bindings = {(b["metadata"]["namespace"], b["metadata"]["name"]) for b in by_kind(objects, "RoleBinding")}
    assert set(roles) == bindings
    with_default = render("operator.namespaces={default}")
    assert not [r for r in by_kind(with_default, "Role") if r["metadata"]["name"].endswith("-node-events")]


def test_deployment_is_hardened(render: Render) -> None:
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532  # the Dockerfile's USER
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]], "a writable /tmp (HOME) on a read-only root filesystem"


def _operator_args(render: Render, *sets: str) -> list[str]:
    container = one(render(*sets), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    # What the kubelet does with $(VAR) references to the container's env.
    return [a.replace("$(POD_NAMESPACE)", "pj-system").replace("$(POD_NAME)", "pj-0") for a in container["args"]]


def test_operator_values_become_real_operator_flags(render: Render) -> None:
    args = _operator_args(
        render,
        "operator.logLevel=DEBUG",
        "operator.namespaces={team-a,team-b}",
        "operator.strictFifo=false",
        "operator.resyncSeconds=12",
        "operator.writeConcurrency=7",
        "operator.backgroundChains=64",
        "operator.waitingMessageRefreshSeconds=5",
        "operator.leaderElection.leaseDurationSeconds=9",
        "operator.leaderElection.leaseName=pj-lease",
        "operator.metricsPort=9090",
    )
    parsed = build_parser().parse_args(args)  # an unknown flag would exit here
    assert parsed.handler.__name__ == "_operator"
    assert parsed.log_level == "DEBUG"
    assert parsed.namespace == ["team-a", "team-b"]
    assert parsed.best_effort_fifo is True
    assert parsed.resync_seconds == 12 and parsed.write_concurrency == 7 and parsed.background_chains == 64
    assert parsed.waiting_message_refresh == 5
    assert parsed.lease_duration == 9 and parsed.lease_name == "pj-lease" and parsed.lease_namespace == "pj-system"
    assert parsed.identity == "pj-0" and parsed.metrics_port == 9090
    assert str(parsed.topology_config) == "/etc/paralleljob/topology.yaml"
    defaults = build_parser().parse_args(_operator_args(render))
    assert defaults.best_effort_fifo is False and defaults.namespace == [] and defaults.lease_duration == 15
    assert defaults.write_concurrency == DEFAULT_WRITE_CONCURRENCY  # the chart's default is the operator's


def _topology(render: Render, *sets: str) -> TopologyConfig:
    configmap = one(render(*sets, show_only=["templates/configmap.yaml"]), "ConfigMap")
    return topology_from_mapping(yaml.safe_load(configmap["data"]["topology.yaml"])["topology"])


def test_topology_defaults_are_the_operators_defaults(render: Render) -> None:
    assert _topology(render) == TopologyConfig()


def test_topology_values_reach_the_operator(render: Render) -> None:
    topology = _topology(
        render,
        "topology.nodeBandwidthGbps=900",
        "topology.levels[0].name=rack",
        "topology.levels[0].labels={example.com/rack}",
        "topology.levels[0].bandwidthGbps=100",
        "topology.toleratedTaints={nvidia.com/gpu,example.com/dedicated}",
    )
    assert topology.node_bandwidth_gbps == 900
    assert [(lv.name, lv.labels, lv.bandwidth_gbps) for lv in topology.levels] == [("rack", ("example.com/rack",), 100)]
    assert topology.tolerated_taints == ("nvidia.com/gpu", "example.com/dedicated")
    checksum = "checksum/topology"
    before = one(render(), "Deployment")["spec"]["template"]["metadata"]["annotations"][checksum]
    after = one(render("topology.nodeBandwidthGbps=900"), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert after[checksum] != before, "a topology change must roll the operator (it reads the file at start)"


def test_pcie_root_level_is_off_by_default_and_reaches_the_operator(render: Render) -> None:
    assert _topology(render).pcie_root_bandwidth_gbps == 0
    topology = _topology(
        render,
        "topology.nodeBandwidthGbps=32",
        "topology.pcieRootBandwidthGbps=64",
        "topology.levels[0].name=leaf",
        "topology.levels[0].labels={network.topology.nvidia.com/leaf}",
        "topology.levels[0].bandwidthGbps=25",
    )
    assert (topology.node_bandwidth_gbps, topology.pcie_root_bandwidth_gbps) == (32, 64)


def test_nvlink_spares_are_off_by_default_and_reach_the_operator(render: Render) -> None:
    assert _topology(render).nvlink_spares_per_clique == 0
    assert _topology(render, "topology.nvlinkSparesPerClique=2").nvlink_spares_per_clique == 2


def test_queues_become_parallel_job_queues(render: Render) -> None:
    objects = render(
        "queues[0].name=research",
        "queues[0].weight=2",
        "queues[0].guaranteedGPUs=16",
        "queues[0].maxGPUs=48",
        "queues[0].namespaces={team-a}",
        "queues[1].name=batch",
    )
    queues = {q["metadata"]["name"]: q for q in by_kind(objects, "ParallelJobQueue")}
    assert queues["research"]["spec"] == {"weight": 2, "guaranteedGPUs": 16, "maxGPUs": 48, "namespaces": ["team-a"]}
    assert queues["batch"]["spec"] == {}, "an object, so the CRD's defaults apply"


def test_decimals_given_with_set_arrive_as_numbers(render: Render) -> None:
    """`helm --set` passes 1.5 as a string: the schema accepts numeric strings and the output is numeric."""
    objects = render("queues[0].name=q", "queues[0].weight=1.5", "topology.clusterBandwidthGbps=12.5")
    assert one(objects, "ParallelJobQueue")["spec"] == {"weight": 1.5}
    topology = yaml.safe_load(one(objects, "ConfigMap")["data"]["topology.yaml"])["topology"]
    assert topology["clusterBandwidthGbps"] == 12.5


def test_agent_daemonset_runs_the_agent_command(render: Render) -> None:
    daemonset = one(render("agent.enabled=true", "agent.intervalSeconds=2"), "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    args = [a.replace("$(NODE_NAME)", "gpu-node-000") for a in container["args"]]
    parsed = build_parser().parse_args(args)
    assert parsed.node == "gpu-node-000" and parsed.interval == 2 and parsed.metrics_port == 9410
    assert container["image"] == "paralleljob:0.1.0"  # one image for both
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The same flags the agent's own manifest (deploy/agent/daemonset.yaml) passes.
    shipped = yaml.safe_load((chart_dir().parents[1] / "deploy" / "agent" / "daemonset.yaml").read_text())
    shipped_flags = {a.split("=")[0] for a in shipped["spec"]["template"]["spec"]["containers"][0]["args"]}
    assert shipped_flags <= {a.split("=")[0] for a in container["args"]}


def test_agent_fake_nvml_script_reaches_the_agent_from_a_configmap(render: Render) -> None:
    """agent.fakeNvml (clusters without GPUs: the dev cluster's real nodes) becomes --fake-nvml on a file the
    DaemonSet mounts from a ConfigMap, parsed here by the agent's own script loader; unset, none of it."""
    from paralleljob.agent.fake import parse_script

    plain = one(render("agent.enabled=true"), "DaemonSet")["spec"]["template"]
    assert not [a for a in plain["spec"]["containers"][0]["args"] if a.startswith("--fake-nvml")]
    assert "annotations" not in plain["metadata"]
    objects = render("agent.enabled=true", "agent.fakeNvml=gpus: 4")
    template = one(objects, "DaemonSet")["spec"]["template"]
    container = template["spec"]["containers"][0]
    args = [a.replace("$(NODE_NAME)", "real-node-0") for a in container["args"]]
    path = str(build_parser().parse_args(args).fake_nvml)
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == mount["name"])
    configmap = one(objects, "ConfigMap", volume["configMap"]["name"])
    script = configmap["data"][path.rsplit("/", 1)[1]]
    assert parse_script(yaml.safe_load(script)).gpus == 4
    assert template["metadata"]["annotations"]["checksum/fake-nvml"]  # a new script rolls the agents


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("topology.levels[0].bandwidthGbps=-1", "bandwidthGbps"),
        ("operator.writeConcurrency=0", "writeConcurrency"),
        ("operator.backgroundChains=0", "backgroundChains"),
        ("operator.waitingMessageRefreshSeconds=-1", "waitingMessageRefreshSeconds"),
        ("operator.logLevel=LOUD", "logLevel"),
        ("queues[0].weight=2", "name"),
        ("queues[0].weight=heavy", "weight"),
        ("operator.replica=2", "replica"),
    ],
)
def test_schema_rejects_bad_values(helm: dict[str, str], value: str, complaint: str) -> None:
    args = [str(ensure_helm()), "template", "pj", str(chart_dir()), "--set", value]
    result = subprocess.run(args, env=helm, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode != 0, f"{value} was accepted"
    assert "schema" in result.stderr.lower() and complaint in result.stderr, result.stderr


def test_refusing_privileged_templates_is_an_admission_policy_off_by_default(render: Render) -> None:
    # Issue 22: a template with privileged/hostNetwork was passed through without a word. Pod Security on the
    # namespace governs the pods; this value also refuses the ParallelJob itself, at `kubectl apply`.
    assert not by_kind(render(api_versions=[VAP]), "ValidatingAdmissionPolicy"), "off by default"
    objects = render("operator.refusePrivilegedTemplates=true", api_versions=[VAP])
    policy = one(objects, "ValidatingAdmissionPolicy", "-privileged-templates")
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": ["paralleljob.dev"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["paralleljobs"],
        }
    ]
    messages = " ".join(v["message"] for v in policy["spec"]["validations"])
    for field in ("hostNetwork", "hostPID", "hostIPC", "privileged: true"):
        assert field in messages
    binding = one(objects, "ValidatingAdmissionPolicyBinding", "-privileged-templates")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    # where the API server has no ValidatingAdmissionPolicy the install says so instead of doing nothing
    with pytest.raises(RuntimeError, match=r"needs admissionregistration\.k8s\.io/v1 ValidatingAdmissionPolicy"):
        render("operator.refusePrivilegedTemplates=true")
    with pytest.raises(RuntimeError, match="refusePrivilegedTemplates"):  # values.schema.json: a boolean
        render("operator.refusePrivilegedTemplates=maybe")

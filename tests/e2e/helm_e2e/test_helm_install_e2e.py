"""``helm install`` / ``upgrade`` / ``uninstall`` of the chart on a real API server, and the proof that its
RBAC is enough for the operator (a placement and a node-failure repair done with the chart's ServiceAccount
token only) and no more (what the operator never does is refused). The release has the README's name, and
the operator and the web view run with the variables the release's Services would give their pods through
service links. Tests run in file order: the last one uninstalls."""

from __future__ import annotations

import json
import re
import secrets
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from helmhelpers import (
    IDENTITY,
    RELEASE,
    SERVICE_ACCOUNT,
    WEB_ACCOUNT,
    ChartOperator,
    Release,
    deployment_args,
    service_account_kubeconfig,
    service_link_env,
)
from kubernetes_asyncio.client import (
    ApiClient,
    AppsV1Api,
    CustomObjectsApi,
    FlowcontrolApiserverV1Api,
    RbacAuthorizationV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, assert_gang_on_record, assert_no_gpu_used_twice, jobs_in

from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools.browser import DashboardProcess
from paralleljob.devtools.requestmix import apiserver_metrics, counter_by
from paralleljob.k8s.edge.constants import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.e2e

QUEUE = f"e2e-helm-{secrets.token_hex(3)}"


def _status(kube: KubeSession, call: Any) -> int:
    """The HTTP status of an API call: 200 when it went through."""
    try:
        kube.run(call)
    except ApiException as exc:
        return int(exc.status)
    return 200


def test_install_creates_the_release_objects(kube: KubeSession, release: Release) -> None:
    listed = release.helm("list", "--output", "json").stdout
    assert f'"name":"{release.name}"' in listed.replace(" ", "") and "deployed" in listed
    rbac: Any = RbacAuthorizationV1Api(kube.api)
    apps: Any = AppsV1Api(kube.api)
    kube.run(kube.core.read_namespaced_service_account(SERVICE_ACCOUNT, release.namespace))
    kube.run(rbac.read_cluster_role(SERVICE_ACCOUNT))
    kube.run(rbac.read_namespaced_role(f"{SERVICE_ACCOUNT}-leader-election", release.namespace))
    kube.run(kube.core.read_namespaced_service(f"{SERVICE_ACCOUNT}-metrics", release.namespace))
    deployment = kube.run(apps.read_namespaced_deployment(SERVICE_ACCOUNT, release.namespace))
    assert deployment.spec.template.spec.containers[0].image == "paralleljob:e2e"


def test_the_readme_release_names_and_its_service_links(kube: KubeSession, release: Release) -> None:
    """Under the README's release name the objects are named paralleljob*, so the metrics Service's service
    link is PARALLELJOB_METRICS_PORT=tcp://...: the chart's pods take no links, the operator started with
    them anyway (the chart_operator fixture) and the notes name the Services that exist."""
    assert release.name == RELEASE == "paralleljob" and SERVICE_ACCOUNT == "paralleljob"
    services = {s.metadata.name for s in kube.run(kube.core.list_namespaced_service(release.namespace)).items}
    assert services == {"paralleljob-metrics", "paralleljob-web"}
    links = service_link_env(kube, release.namespace)
    assert links["PARALLELJOB_METRICS_PORT"].startswith("tcp://")
    apps: Any = AppsV1Api(kube.api)
    for name in (SERVICE_ACCOUNT, WEB_ACCOUNT):
        deployment = kube.run(apps.read_namespaced_deployment(name, release.namespace))
        assert deployment.spec.template.spec.enable_service_links is False, name
    notes = release.helm("get", "notes", release.name).stdout
    forwards = set(re.findall(r"port-forward svc/(\S+) ", notes))
    assert forwards == {"paralleljob-metrics", "paralleljob-web"} and forwards <= services, notes
    assert f"kubectl -n {release.namespace} port-forward svc/paralleljob-web 8090" in notes, notes


def test_operator_with_the_charts_service_account_places_and_repairs(
    pjs: Jobs, chaos: KubeSession, chart_operator: ChartOperator, release: Release
) -> None:
    pjs.create("helm-llm", 4, 2, 2, failurePolicy={"strategy": "minimal"})
    before = pjs.wait_phase("helm-llm", "Running")
    assert_gang_on_record(pjs, "helm-llm")
    victim = before["placement"]["pods"][0]["node"]
    chaos.make_node_not_ready(victim)
    status = pjs.wait_phase("helm-llm", "Running", restarts=1)
    assert victim not in status["nodes"].split(",")
    assert_gang_on_record(pjs, "helm-llm")
    assert_no_gpu_used_twice(chaos)
    # Events go out in the background and failures there are only logged, so check they really landed.
    pjs.wait_events("helm-llm", {"Placed", "NodeFailure", "Repaired"})
    # The leader-election Lease lives in the release's namespace, held by the chart's operator.
    lease = kube_lease(chaos, release)
    assert lease["holderIdentity"] == IDENTITY
    # ... and API Priority and Fairness put its Lease requests in the chart's FlowSchema, at leader-election.
    dispatched = counter_by(
        apiserver_metrics(release.admin_kubeconfig), "apiserver_flowcontrol_dispatched_requests",
        ("flow_schema", "priority_level"),
    )  # fmt: skip
    assert dispatched.get((f"{SERVICE_ACCOUNT}-leader-election", "leader-election"), 0) > 0, dispatched
    logs = chart_operator.all_logs().lower()
    # ApiError logs as "HTTP 403: ..." (a bare " 403" also matched the debug line of reconcile pass 403)
    assert "forbidden" not in logs and "http 403" not in logs, chart_operator.log_tail()


def kube_lease(kube: KubeSession, release: Release) -> dict[str, Any]:
    from kubernetes_asyncio.client import CoordinationV1Api

    api: Any = CoordinationV1Api(kube.api)
    lease = kube.run(api.read_namespaced_lease("paralleljob-operator", release.namespace))
    return dict(kube.api.sanitize_for_serialization(lease.spec))


def test_the_service_account_may_do_nothing_else(kube: KubeSession, release: Release, namespace: str) -> None:
    sa = KubeSession(service_account_kubeconfig(kube, release, release.work / "sa-probe-kubeconfig"))
    try:
        api: ApiClient = sa.api
        rbac: Any = RbacAuthorizationV1Api(api)
        apps: Any = AppsV1Api(api)
        custom: Any = CustomObjectsApi(api)
        node = kube.run(kube.core.list_node()).items[0].metadata.name
        role = {"metadata": {"name": "pj-escalate"}, "rules": []}
        refused = {
            "delete a node": sa.core.delete_node(node),
            "label a node": sa.core.patch_node(node, {"metadata": {"labels": {"x": "y"}}}),
            "read secrets (own namespace)": sa.core.list_namespaced_secret(release.namespace),
            "read secrets (anywhere)": sa.core.list_secret_for_all_namespaces(),
            "read configmaps": sa.core.list_namespaced_config_map(release.namespace),
            "create a clusterrole": rbac.create_cluster_role(role),
            "bind a clusterrole": rbac.create_namespaced_role_binding(
                namespace,
                {
                    "metadata": {"name": "pj-escalate"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                    "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": release.namespace}],
                },
            ),
            "create a deployment": apps.create_namespaced_deployment(namespace, {"metadata": {"name": "x"}}),
            "change a job's spec": custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "any", {"spec": {"priority": 1}}
            ),
            "delete a job": custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "any"),
            "create a queue": custom.create_cluster_custom_object(
                GROUP,
                VERSION,
                "paralleljobqueues",
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": "x"}},
            ),
            "delete a service": sa.core.delete_namespaced_service("any", namespace),
            "read another lease": _lease_get(sa, release.namespace, "someone-else"),
            "create a namespace": sa.core.create_namespace({"metadata": {"name": "pj-escalate"}}),
        }
        statuses = {what: _status(sa, call) for what, call in refused.items()}
        assert statuses == dict.fromkeys(refused, 403)
        # ... while what the operator does is allowed (reads here; writes were proven by the repair above).
        assert _status(sa, sa.core.list_node()) == 200
        assert _status(sa, sa.core.list_pod_for_all_namespaces(limit=1)) == 200
        assert _status(sa, custom.list_cluster_custom_object(GROUP, VERSION, "paralleljobqueues")) == 200
        # pods may be patched (a preemption victim's checkpoint-now annotation): a missing one is a 404, not 403
        patch = {"metadata": {"annotations": {"paralleljob.dev/checkpoint-requested": "x"}}}
        assert _status(sa, sa.core.patch_namespaced_pod("any", namespace, patch)) == 404
    finally:
        sa.close()


def _lease_get(session: KubeSession, namespace: str, name: str) -> Any:
    from kubernetes_asyncio.client import CoordinationV1Api

    api: Any = CoordinationV1Api(session.api)
    return api.read_namespaced_lease(name, namespace)


def test_web_view_runs_with_its_own_read_only_account(
    kube: KubeSession, release: Release, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chart's web view (webView.enabled): its Deployment runs `paralleljob dashboard` under its own
    ServiceAccount, and with a token of that account alone (out of cluster, as the Deployment's pod would
    run it, service links included) the web view syncs the whole cluster, while every write is refused."""
    apps: Any = AppsV1Api(kube.api)
    deployment = kube.run(apps.read_namespaced_deployment(WEB_ACCOUNT, release.namespace))
    pod_spec = deployment.spec.template.spec
    assert pod_spec.service_account_name == WEB_ACCOUNT
    (container,) = pod_spec.containers
    assert container.image == "paralleljob:e2e" and container.args[0] == "dashboard"
    assert container.readiness_probe.http_get.path == "/healthz"
    service = kube.run(kube.core.read_namespaced_service(WEB_ACCOUNT, release.namespace))
    assert service.spec.selector == deployment.spec.selector.match_labels
    assert service.spec.ports[0].target_port == "http"
    configmap = kube.run(kube.core.read_namespaced_config_map(f"{SERVICE_ACCOUNT}-topology", release.namespace))
    topology = tmp_path / "topology.yaml"
    topology.write_text(configmap.data["topology.yaml"])
    kubeconfig = service_account_kubeconfig(kube, release, tmp_path / "web-kubeconfig", WEB_ACCOUNT)
    args = [
        f"--topology-config={topology}" if a.startswith("--topology-config=") else a
        for a in container.args[1:]
        if not a.startswith(("--host=", "--port="))
    ]
    for variable, value in service_link_env(kube, release.namespace).items():  # the process inherits them
        monkeypatch.setenv(variable, value)
    web = DashboardProcess(kubeconfig, tmp_path / "dashboard.log", extra_args=args)
    web.start()  # healthy only once every store has listed: the grants are enough to read the cluster
    try:
        with urllib.request.urlopen(web.url + "api/snapshot", timeout=30) as response:
            snapshot = json.loads(response.read())
    finally:
        web.stop()
    assert "forbidden" not in web.log_tail().lower(), web.log_tail()
    nodes = {n.metadata.name for n in kube.run(kube.core.list_node()).items}
    assert set(snapshot["nodes"]) == nodes  # name -> packed row
    sa = KubeSession(kubeconfig)
    try:
        custom: Any = CustomObjectsApi(sa.api)
        node = sorted(nodes)[0]
        pod = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x"}]}}
        refused = {
            "create a pod": sa.core.create_namespaced_pod(namespace, pod),
            "label a node": sa.core.patch_node(node, {"metadata": {"labels": {"x": "y"}}}),
            "read secrets": sa.core.list_secret_for_all_namespaces(),
            "write a job's status": custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, "any", {"status": {"phase": "Failed"}}
            ),
            "create an event": sa.core.create_namespaced_event(namespace, {"metadata": {"name": "x"}}),
        }
        assert {what: _status(sa, call) for what, call in refused.items()} == dict.fromkeys(refused, 403)
        claims = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")
        assert _status(sa, claims) == 200
    finally:
        sa.close()


def test_upgrade_applies_changed_values(kube: KubeSession, release: Release) -> None:
    release.upgrade(
        "operator.logLevel=DEBUG",
        "topology.nodeBandwidthGbps=900",
        f"queues[0].name={QUEUE}",
        "queues[0].maxGPUs=16",
        "queues[0].weight=3",
    )
    apps: Any = AppsV1Api(kube.api)
    deployment = kube.run(apps.read_namespaced_deployment(SERVICE_ACCOUNT, release.namespace))
    assert "--log-level=DEBUG" in deployment.spec.template.spec.containers[0].args
    assert deployment.metadata.generation == 2
    configmap = kube.run(kube.core.read_namespaced_config_map(f"{SERVICE_ACCOUNT}-topology", release.namespace))
    assert "nodeBandwidthGbps: 900" in configmap.data["topology.yaml"]
    custom: Any = CustomObjectsApi(kube.api)
    queue = kube.run(custom.get_cluster_custom_object(GROUP, VERSION, "paralleljobqueues", QUEUE))
    assert queue["spec"]["maxGPUs"] == 16 and queue["spec"]["weight"] == 3
    history = release.helm("history", release.name, "--output", "json").stdout
    assert '"revision":2' in history.replace(" ", "")


def test_watching_some_namespaces_narrows_the_grants_to_them(
    kube: KubeSession, release: Release, chart_operator: ChartOperator, namespace: str
) -> None:
    """operator.namespaces: the workload verbs move from the ClusterRole into Roles of those namespaces."""
    chart_operator.stop()
    release.upgrade(f"operator.namespaces={{{namespace}}}")
    rbac: Any = RbacAuthorizationV1Api(kube.api)
    cluster_rules = kube.run(rbac.read_cluster_role(SERVICE_ACCOUNT)).rules
    assert all("create" not in rule.verbs for rule in cluster_rules), "no cluster-wide writes left"
    kube.run(rbac.read_namespaced_role(SERVICE_ACCOUNT, namespace))
    chart_operator.deployment_args = deployment_args(kube, release, release.work / "topology.yaml")
    assert f"--namespace={namespace}" in chart_operator.deployment_args
    chart_operator.start()
    # through the shared fixture's block, so this scenario too must end settled (pass rate, Events, log)
    with jobs_in(kube, namespace, chart_operator, check_view=False) as jobs:
        jobs.create("scoped", 2, 2, 1)
        jobs.wait_phase("scoped", "Running")
        assert_gang_on_record(jobs, "scoped")
        jobs.wait_events("scoped", {"Placed"})
    sa = KubeSession(chart_operator.kubeconfig)
    try:
        pod = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x"}]}}
        assert _status(sa, sa.core.create_namespaced_pod(namespace, pod)) != 403
        assert _status(sa, sa.core.create_namespaced_pod(release.namespace, pod)) == 403
    finally:
        sa.close()
    kube.run(kube.core.delete_namespaced_pod("x", namespace, grace_period_seconds=0))
    log = chart_operator.log_path.read_text(errors="replace").lower()
    assert "forbidden" not in log and "http 403" not in log, chart_operator.log_tail()


def test_uninstall_removes_everything_but_the_crds(
    kube: KubeSession, release: Release, chart_operator: ChartOperator
) -> None:
    chart_operator.stop()  # it would lose its credentials with the ServiceAccount
    release.helm("uninstall", release.name, "--wait", "--timeout", "60s")
    rbac: Any = RbacAuthorizationV1Api(kube.api)
    apps: Any = AppsV1Api(kube.api)
    custom: Any = CustomObjectsApi(kube.api)
    flowcontrol: Any = FlowcontrolApiserverV1Api(kube.api)
    gone = {
        "serviceaccount": kube.core.read_namespaced_service_account(SERVICE_ACCOUNT, release.namespace),
        "deployment": apps.read_namespaced_deployment(SERVICE_ACCOUNT, release.namespace),
        "service": kube.core.read_namespaced_service(f"{SERVICE_ACCOUNT}-metrics", release.namespace),
        "configmap": kube.core.read_namespaced_config_map(f"{SERVICE_ACCOUNT}-topology", release.namespace),
        "clusterrole": rbac.read_cluster_role(SERVICE_ACCOUNT),
        "clusterrolebinding": rbac.read_cluster_role_binding(SERVICE_ACCOUNT),
        "role": rbac.read_namespaced_role(f"{SERVICE_ACCOUNT}-leader-election", release.namespace),
        "rolebinding": rbac.read_namespaced_role_binding(f"{SERVICE_ACCOUNT}-leader-election", release.namespace),
        "queue": custom.get_cluster_custom_object(GROUP, VERSION, "paralleljobqueues", QUEUE),
        "web view deployment": apps.read_namespaced_deployment(WEB_ACCOUNT, release.namespace),
        "web view service": kube.core.read_namespaced_service(WEB_ACCOUNT, release.namespace),
        "web view clusterrole": rbac.read_cluster_role(WEB_ACCOUNT),
        "flowschema": flowcontrol.read_flow_schema(f"{SERVICE_ACCOUNT}-leader-election"),
    }
    assert {what: _status(kube, call) for what, call in gone.items()} == dict.fromkeys(gone, 404)
    # CRDs came from the chart's crds/ folder: Helm never deletes those (nor, with them, every ParallelJob).
    from kubernetes_asyncio.client import ApiextensionsV1Api

    extensions: Any = ApiextensionsV1Api(kube.api)
    kube.run(extensions.read_custom_resource_definition(f"{PLURAL}.{GROUP}"))
    assert release.helm("list", "--output", "json").stdout.strip() == "[]"

"""Bad or demanding input on a real API server: unknown queues, template constraints (selectors, taints,
requests), fields the operator owns, and a node that reports more GPUs than it has."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, assert_gang_on_record, wait_for

from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

QUEUES = ("paralleljob.dev", "v1alpha1", "paralleljobqueues")
POOL = "e2e.paralleljob.dev/pool"


def template(**pod_spec: Any) -> dict[str, Any]:
    containers = pod_spec.pop("containers", [{"name": "trainer", "image": "trainer:e2e"}])
    return {"spec": {"containers": containers, **pod_spec}}


def placed_condition(pjs: Jobs, name: str, reason: str) -> dict[str, Any]:
    return dict(
        wait_for(
            f"{name}: Placed=False with reason {reason}",
            lambda: next(
                (c for c in pjs.status(name).get("conditions", []) if c["type"] == "Placed" and c["reason"] == reason),
                None,
            ),
        )
    )


def test_an_unknown_queue_waits_and_runs_once_the_queue_is_created(pjs: Jobs) -> None:
    queue = f"typo-{pjs.namespace}"[:63]
    pjs.create("typo", 8, 1, 1, queue=queue)
    waiting = placed_condition(pjs, "typo", "QueueNotFound")
    assert f"queue {queue} does not exist" in waiting["message"]
    assert pjs.status("typo")["phase"] == "Queued" and not pjs.pods("typo")
    assert f"queue {queue} does not exist" in pjs.status("typo")["message"]  # not "waits for room in queue"
    wait_for("a QueueNotFound event", lambda: any(e.reason == "QueueNotFound" for e in pjs.events("typo")))
    body = {"apiVersion": "paralleljob.dev/v1alpha1", "kind": "ParallelJobQueue", "metadata": {"name": queue}}
    pjs.kube.run(pjs.custom.create_cluster_custom_object(*QUEUES, {**body, "spec": {"maxGPUs": 8}}))
    try:
        pjs.wait_phase("typo", "Running")
        assert_gang_on_record(pjs, "typo")
    finally:
        pjs.kube.run(pjs.custom.delete_cluster_custom_object(*QUEUES, queue))


def test_a_node_selector_nobody_matches_fails_with_the_reason(pjs: Jobs) -> None:
    pjs.create("picky", 8, 1, 1, template=template(nodeSelector={POOL: "nowhere"}))
    status = pjs.wait_phase("picky", "Failed")
    assert status["reason"] == "Unschedulable" and f"nodeSelector {{{POOL}=nowhere}}" in status["message"]
    wait_for("an Unschedulable event", lambda: any(e.reason == "Unschedulable" for e in pjs.events("picky")))
    assert not pjs.pods("picky")


def test_a_node_selector_matching_some_nodes_places_only_there(pjs: Jobs, chaos: KubeSession) -> None:
    chosen = chaos.shape.names()[5:7]
    for name in chosen:
        chaos.run(chaos.core.patch_node(name, {"metadata": {"labels": {POOL: "train"}}}))
    try:
        pjs.create("selective", 4, 1, 4, template=template(nodeSelector={POOL: "train"}))
        status = pjs.wait_phase("selective", "Running")
        assert sorted(status["nodes"].split(",")) == sorted(chosen)
        assert {p.spec.node_name for p in pjs.live_pods("selective")} == set(chosen)
    finally:
        for name in chosen:
            chaos.run(chaos.core.patch_node(name, {"metadata": {"labels": {POOL: None}}}))


def test_a_tainted_node_takes_only_jobs_that_tolerate_it(pjs: Jobs, chaos: KubeSession) -> None:
    names = chaos.shape.names()
    tainted, open_node = names[:7], names[7]
    for name in tainted:
        chaos.run(
            chaos.core.patch_node(
                name, {"spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}}
            )
        )
    pjs.create("plain", 8, 1, 1)
    assert pjs.wait_phase("plain", "Running")["nodes"] == open_node
    pjs.create("plain-too", 8, 1, 1)
    waiting = placed_condition(pjs, "plain-too", "Unschedulable")
    assert "dedicated=ml:NoSchedule is not tolerated" in waiting["message"]
    pjs.delete("plain-too")  # under strict FIFO it would hold back the next job of its queue
    tolerant = template(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}])
    pjs.create("tolerant", 8, 1, 2, template=tolerant)
    status = pjs.wait_phase("tolerant", "Running")
    assert set(status["nodes"].split(",")) <= set(tainted)
    assert_gang_on_record(pjs, "tolerant")


def test_a_cpu_request_no_node_can_hold_is_refused_with_the_reason(pjs: Jobs) -> None:
    greedy = [{"name": "trainer", "image": "trainer:e2e", "resources": {"requests": {"cpu": "100000"}}}]
    pjs.create("greedy", 2, 1, 1, template=template(containers=greedy))
    status = pjs.wait_phase("greedy", "Failed")
    assert status["reason"] == "Unschedulable" and "one worker requests cpu=100000" in status["message"]
    assert "cpu=192" in status["message"] and not pjs.pods("greedy")


@pytest.mark.parametrize(
    ("pod_spec", "message"),
    [
        ({"nodeName": "anywhere"}, "template.spec.nodeName must not be set"),
        ({"restartPolicy": "Always"}, "template.spec.restartPolicy must be Never"),
    ],
)
def test_fields_the_operator_owns_are_refused_by_the_api_server(
    pjs: Jobs, pod_spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        pjs.create("owned", 2, 1, 1, template=template(**pod_spec))
    assert refused.value.status == 422 and message in str(refused.value.body), refused.value.body


def test_a_gpu_request_other_than_tensor_fails_the_job_as_invalid_template(pjs: Jobs) -> None:
    wrong = [
        {"name": "trainer", "image": "trainer:e2e"},
        {"name": "sidecar", "image": "sidecar:e2e", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
    ]
    pjs.create("sidecar-gpu", 2, 1, 1, template=template(containers=wrong))
    status = pjs.wait_phase("sidecar-gpu", "Failed")
    assert status["reason"] == "InvalidTemplate" and "containers[1]" in status["message"], status
    wait_for("an InvalidTemplate event", lambda: any(e.reason == "InvalidTemplate" for e in pjs.events("sidecar-gpu")))
    assert not pjs.pods("sidecar-gpu")


def test_a_node_reporting_999_gpus_is_capped_at_its_gpu_count(pjs: Jobs, chaos: KubeSession) -> None:
    node = chaos.shape.node_name(6)
    chaos.run(chaos.core.patch_node_status(node, {"status": {"allocatable": {"nvidia.com/gpu": "999"}}}))
    try:

        def warned() -> str | None:
            events = chaos.run(
                chaos.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}")
            )
            return next((e.message for e in events.items if e.reason == "MalformedLabel" and "999" in e.message), None)

        assert "nvidia.com/gpu.count=8" in wait_for("a MalformedLabel event about 999 GPUs", warned)
        # the whole cluster is 8 nodes x 8 GPUs: a job for 9 nodes' worth can never fit, 999 or not
        pjs.create("too-big", 8, 1, 9)
        status = pjs.wait_phase("too-big", "Failed")
        assert "holds only 8" in status["message"], status["message"]
        pjs.create("fills", 8, 1, 8)
        status = pjs.wait_phase("fills", "Running")
        pods_on_node = [p for p in pjs.live_pods("fills") if p.spec.node_name == node]
        assert len(pods_on_node) == 1
    finally:
        chaos.run(chaos.core.patch_node_status(node, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}}))


def test_a_node_offering_0_of_its_8_gpus_gets_a_warning_event(pjs: Jobs, chaos: KubeSession) -> None:
    # Issue 22: the 999 case above got an event, the opposite case (device plugin down) got none.
    node = chaos.shape.node_name(5)
    chaos.run(chaos.core.patch_node_status(node, {"status": {"allocatable": {"nvidia.com/gpu": "0"}}}))
    try:

        def warned() -> str | None:
            events = chaos.run(
                chaos.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}")
            )
            return next(
                (e.message for e in events.items if e.reason == "MalformedLabel" and "is less than" in e.message), None
            )

        message = wait_for("a MalformedLabel event about 0 of 8 GPUs", warned)
        assert "allocatable nvidia.com/gpu=0 is less than nvidia.com/gpu.count=8" in message
    finally:
        chaos.run(chaos.core.patch_node_status(node, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}}))


def test_can_never_fit_fails_at_once_behind_a_blocked_strict_fifo_head(pjs: Jobs) -> None:
    pjs.create("everything", 8, 1, 8)  # the whole cluster
    pjs.wait_phase("everything", "Running")
    pjs.create("head", 8, 1, 1)  # blocks its queue until room frees
    placed_condition(pjs, "head", "Unschedulable")
    pjs.create("behind-huge", 16, 1, 1)  # behind the head in the same queue, and can never fit
    status = pjs.wait_phase("behind-huge", "Failed", timeout_s=60)
    assert status["reason"] == "Unschedulable" and "largest node has 8" in status["message"]
    assert pjs.status("head")["phase"] == "Queued"


def test_the_charts_privileged_template_policy_is_enforced_by_the_api_server(pjs: Jobs, tmp_path: Any) -> None:
    # Issue 22: privileged/hostNetwork templates were passed through. With the chart value
    # operator.refusePrivilegedTemplates the API server itself refuses them (a ValidatingAdmissionPolicy).
    import yaml
    from kubernetes_asyncio.client import AdmissionregistrationV1Api

    from paralleljob.packaging.chart import chart_dir
    from paralleljob.packaging.helm import helm_env, run_helm

    args = ["template", "pj", str(chart_dir()), "--set", "operator.refusePrivilegedTemplates=true",
            "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
            "--show-only", "templates/admission.yaml"]  # fmt: skip
    policy, binding = [d for d in yaml.safe_load_all(run_helm(args, helm_env(tmp_path)).stdout) if d]
    admission: Any = AdmissionregistrationV1Api(pjs.kube.api)
    pjs.kube.run(admission.create_validating_admission_policy(policy))
    pjs.kube.run(admission.create_validating_admission_policy_binding(binding))
    try:
        trainer = {"name": "trainer", "image": "trainer:e2e"}
        privileged = {**trainer, "securityContext": {"privileged": True}}
        def refused(body: dict[str, Any]) -> str | None:
            try:  # the policy takes a moment to be loaded by the API server
                pjs.create_raw(body)
            except ApiException as exc:
                return str(exc.body) if exc.status == 422 else None
            pjs.delete(body["metadata"]["name"])
            return None

        for name, pod_spec, words in (
            ("host-net", {"hostNetwork": True, "containers": [trainer]}, "hostNetwork is refused on this cluster"),
            ("priv", {"containers": [privileged]}, "securityContext.privileged: true, which is refused"),
            ("priv-init", {"initContainers": [privileged], "containers": [trainer]}, "privileged: true"),
        ):
            body = pjs.manifest(name, 1, 1, 1, template={"spec": pod_spec})
            message = wait_for(f"{name} refused by the policy", lambda body=body: refused(body))
            assert words in message and "operator.refusePrivilegedTemplates" in message
        pjs.create("plain", 1, 1, 1)  # an ordinary template still passes
    finally:
        pjs.kube.run(admission.delete_validating_admission_policy_binding(binding["metadata"]["name"]))
        pjs.kube.run(admission.delete_validating_admission_policy(policy["metadata"]["name"]))

        def admitted() -> bool:  # the API server drops the policy a moment later: the tests after this need it gone
            body = pjs.manifest("after", 1, 1, 1, template={"spec": {"hostNetwork": True, "containers": [trainer]}})
            try:
                pjs.kube.run(
                    pjs.custom.create_namespaced_custom_object(
                        "paralleljob.dev", "v1alpha1", pjs.namespace, "paralleljobs", body, dry_run="All"
                    )
                )
            except ApiException:
                return False
            return True

        wait_for("the policy to be gone", admitted)


def test_a_template_above_the_namespaces_pod_security_level_fails_with_the_reason(pjs: Jobs) -> None:
    # Issue 22: the namespace's Pod Security admission governs the pods the operator creates. Its refusal is a
    # 403 that no retry mends: the job fails with the API server's words, not a loop of rollbacks.
    labels = {"pod-security.kubernetes.io/enforce": "baseline"}
    pjs.kube.run(pjs.kube.core.patch_namespace(pjs.namespace, {"metadata": {"labels": labels}}))
    try:
        trainer = {"name": "trainer", "image": "trainer:e2e"}
        pjs.create("host-net", 1, 1, 1, template=template(hostNetwork=True, containers=[trainer]))
        status = pjs.wait_phase("host-net", "Failed")
        assert "violates PodSecurity" in status["message"] and "fix spec.template" in status["message"], status
        assert not pjs.pods("host-net")
        pjs.create("plain", 1, 1, 1)
        pjs.wait_phase("plain", "Running")
    finally:
        unlabel = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": None}}}
        pjs.kube.run(pjs.kube.core.patch_namespace(pjs.namespace, unlabel))

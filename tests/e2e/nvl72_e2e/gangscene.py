"""What the gang matrix's cases share (``test_gang_matrix_e2e.py``): a case's :class:`Scene` (its cluster, its
ParallelJobs, the hardware it broke and the objects it made for other controllers, both undone after it), the
manifests of the gangs other controllers make (an Indexed Job, a JobSet over trays, a Kubernetes PodGroup with
bare pods), and each failure-policy outcome as read back from the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import BatchV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, wait_for

from paralleljob.devcluster import kubeline
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import (
    GPU_RESOURCE,
    JOB_LABEL,
    NODE_RANK_ANNOTATION,
    PARALLELISM_ANNOTATION,
    POD_GROUP_LABEL,
    SCHEDULER_NAME,
)
from paralleljob.k8s.edge.parse.nativegroups import scheduled_condition, workload_reference
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status

GANG_API = ("scheduling.k8s.io", kubeline.selected().gang_api_version)
SCHEDULED = scheduled_condition(GANG_API[1])
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
HGX_LEAF = {"network.topology.nvidia.com/leaf": "leaf-00"}  # the 4 HGX nodes' rack; no tray is in it
TRAINER = {"name": "trainer", "image": "trainer:e2e"}


@dataclass
class Scene:
    """One case's cluster, ParallelJobs and what it broke (healed after it) and made (deleted after it)."""

    kube: KubeSession
    pjs: Jobs
    broken: set[str] = field(default_factory=set)
    custom: Any = None
    batch: Any = None

    def __post_init__(self) -> None:
        self.custom = CustomObjectsApi(self.kube.api)
        self.batch = BatchV1Api(self.kube.api)

    @property
    def ns(self) -> str:
        return self.pjs.namespace

    # -- hardware ----------------------------------------------------------------------------------------
    def trays(self) -> dict[str, str]:
        """Every tray node -> its clique."""
        nodes = self.kube.run(self.kube.core.list_node()).items
        labelled = {n.metadata.name: (n.metadata.labels or {}).get(cd.CLIQUE_LABEL) for n in nodes}
        return {name: clique for name, clique in labelled.items() if clique}

    def break_gpu(self, node: str, index: int = 0) -> None:
        self.broken.add(node)
        self.kube.set_unhealthy_gpus(node, [index])

    def node_down(self, node: str) -> None:
        self.broken.add(node)
        self.kube.make_node_not_ready(node)

    def heal(self) -> None:
        for node in sorted(self.broken):
            self.kube.heal_node(node)
        for node in sorted(self.broken):
            self.kube.wait_node_ready(node, timeout_s=60)

    # -- objects of other controllers --------------------------------------------------------------------
    def create_gang_object(self, plural: str, body: dict[str, Any]) -> None:
        self.kube.run(self.custom.create_namespaced_custom_object(*GANG_API, self.ns, plural, body))

    def pod_group_condition(self, name: str) -> dict[str, Any]:
        group = self.kube.run(self.custom.get_namespaced_custom_object(*GANG_API, self.ns, "podgroups", name))
        conditions = (group.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == SCHEDULED), {})

    def pods(self) -> list[Any]:
        """The live pods of other controllers' gangs (a ParallelJob's own are the operator's to remove)."""
        listed = self.kube.run(self.kube.core.list_namespaced_pod(self.ns, label_selector=f"!{JOB_LABEL}")).items
        return sorted((p for p in listed if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)

    def gone_ok(self, call: Any) -> None:
        """Run a delete; already gone (a JobSet's Jobs go with it) is fine."""
        try:
            self.kube.run(call)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def remove_all(self) -> None:
        """Delete what the case made for other controllers (JobSets, Jobs, PodGroups, bare pods), until no pod
        is left: their GPUs are free for the next case."""
        kube, ns, custom = self.kube, self.ns, self.custom
        for item in kube.run(custom.list_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2]))["items"]:
            name = item["metadata"]["name"]
            self.gone_ok(
                custom.delete_namespaced_custom_object(
                    *JOBSET_API[:2], ns, JOBSET_API[2], name, propagation_policy="Background"
                )
            )
        for job in kube.run(self.batch.list_namespaced_job(ns)).items:
            self.gone_ok(self.batch.delete_namespaced_job(job.metadata.name, ns, propagation_policy="Background"))
        for plural in ("podgroups", "workloads"):
            for item in kube.run(custom.list_namespaced_custom_object(*GANG_API, ns, plural))["items"]:
                self.gone_ok(custom.delete_namespaced_custom_object(*GANG_API, ns, plural, item["metadata"]["name"]))
        for pod in self.pods():
            self.gone_ok(kube.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0))
        wait_for(f"every pod of {ns} gone", lambda: not self.pods(), timeout_s=120)


def pod_spec(gpus: int, channel: str = "") -> dict[str, Any]:
    """A group pod's spec: ours to place; a tray pod (``channel``) names its clique's channel claim template."""
    container: dict[str, Any] = {**TRAINER, "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER_NAME, "restartPolicy": "Never", "containers": [container]}
    if channel:
        spec["resourceClaims"] = [{"name": cd.CLAIM_NAME, "resourceClaimTemplateName": channel}]
        container["resources"]["claims"] = [{"name": cd.CLAIM_NAME}]
    return spec


def adopting(pjs: Jobs, group: str, tp: int, pp: int, dp: int, **policy: Any) -> None:
    """The group's ParallelJob, made first to carry the failure policy (the operator then adopts into it)."""
    body = Jobs.manifest(group, tp, pp, dp, template=None, podGroup=group, failurePolicy=policy)
    del body["spec"]["template"]
    pjs.create_raw(body)


def indexed_job(scene: Scene, name: str, pods: int, gpus: int, shape: str) -> None:
    scene.kube.run(scene.batch.create_namespaced_job(scene.ns, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {POD_GROUP_LABEL: name}, "annotations": {PARALLELISM_ANNOTATION: shape}},
                "spec": pod_spec(gpus),
            },
        },
    }))  # fmt: skip


def jobset_on_trays(scene: Scene, name: str, pods: int, shape: str) -> None:
    """A JobSet of one child Job whose pods each take a whole tray (docs/pod-groups.md "On NVL72 racks")."""
    template = {
        "metadata": {
            "labels": {POD_GROUP_LABEL: name},
            "annotations": {PARALLELISM_ANNOTATION: shape, "paralleljob.dev/pods-per-job": str(pods)},
        },
        "spec": pod_spec(4, channel=f"{name}-nvlink-channel"),
    }
    job = {
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": 6,
        "template": template,
    }
    body = {
        "apiVersion": "/".join(JOBSET_API[:2]), "kind": "JobSet", "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": "tray", "replicas": 1, "template": {"spec": job}}]},
    }  # fmt: skip
    scene.kube.run(scene.custom.create_namespaced_custom_object(*JOBSET_API[:2], scene.ns, JOBSET_API[2], body))


def native_group(scene: Scene, name: str, min_count: int, pods: int, gpus: int, shape: str, channel: str = "") -> str:
    """A Workload declaring ``shape``, the PodGroup stamped from it (gang of ``min_count``) and ``pods`` bare pods
    joining it, each with its node rank; returns the PodGroup's name."""
    group = f"{name}-workers"
    gang = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    scene.create_gang_object("workloads", {
        "apiVersion": "/".join(GANG_API), "kind": "Workload",
        "metadata": {"name": name, "annotations": {PARALLELISM_ANNOTATION: shape}},
        "spec": {"podGroupTemplates": [{"name": "workers", **gang}]},
    })  # fmt: skip
    scene.create_gang_object("podgroups", {
        "apiVersion": "/".join(GANG_API), "kind": "PodGroup", "metadata": {"name": group},
        "spec": {**workload_reference(GANG_API[1], name, "workers"), **gang},
    })  # fmt: skip
    for rank in range(pods):
        spec = {**pod_spec(gpus, channel), "schedulingGroup": {"podGroupName": group}}
        body = {"metadata": {"name": f"{group}-{rank}", "annotations": {NODE_RANK_ANNOTATION: str(rank)}}, "spec": spec}
        scene.kube.run(scene.kube.core.create_namespaced_pod(scene.ns, body))
    return group


def running(scene: Scene, name: str, layout: str) -> dict[str, Any]:
    status = scene.pjs.wait_phase(name, "Running", timeout_s=120)
    record = record_from_status(status)
    assert record is not None
    trays = scene.trays()
    if layout == "trays":
        assert status["placement"].get("layout") == "trays" and record.trays, status["placement"]
        cliques = {trays[t.node] for t in record.trays}
        assert len(cliques) == 1, f"one clique holds the gang's trays: {cliques}"
    else:
        nodes = {p.node for p in record.pod_slots}
        on = "trays" if layout == "tray nodes" else "HGX nodes"
        assert nodes <= set(trays) if layout == "tray nodes" else not nodes & set(trays), f"not on {on}: {nodes}"
    return status


def gave_up(scene: Scene, name: str, why: str, kind: str) -> dict[str, Any]:
    """Failed by its failure policy: the condition says it gave up and why, its pods are its own or gone."""
    failed = scene.pjs.wait_phase(name, "Failed", timeout_s=120)
    assert why in failed["message"], failed["message"]
    condition = next(c for c in failed["conditions"] if c["type"] == "Failed")
    assert (condition["status"], condition["reason"]) == ("True", "GaveUp") and why in condition["message"], condition
    assert failed["lastFailure"]["kind"] == kind and failed["lastFailure"]["action"] == "failed", failed["lastFailure"]
    return failed


def dropped(scene: Scene, name: str, before: int) -> dict[str, Any]:
    """One replica dropped on lost hardware, the rest kept: no restart counted (a drop is not a restart)."""

    def check() -> dict[str, Any] | None:
        status = scene.pjs.status(name)
        return status if status.get("phase") == "Running" and status.get("replicas") == before - 1 else None

    status = dict(wait_for(f"{name} down to {before - 1} replicas", check, timeout_s=120))
    assert status["lastFailure"]["action"] == "DroppedReplica", status["lastFailure"]
    assert status.get("restarts", 0) == 0 and status["elastic"]["drops"] == 1, status
    scene.pjs.wait_events(name, {"DroppedReplica"})
    return status


def uids(scene: Scene, name: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in scene.pjs.live_pods(name)}


def domain_of(scene: Scene, group: str) -> dict[str, Any] | None:
    listed = scene.kube.run(scene.custom.list_namespaced_custom_object(cd.GROUP, cd.VERSION, scene.ns, cd.PLURAL))
    named = [d for d in listed["items"] if d["metadata"]["name"].startswith(f"{group}-nvl-")]
    return named[0] if named else None

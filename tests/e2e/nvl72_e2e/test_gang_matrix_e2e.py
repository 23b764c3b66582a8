"""Every kind of gang under its failure policy, on one mixed cluster (issue 39, item 2): {HGX nodes, NVL72
trays} x {ParallelJob, adopted pod group, Kubernetes PodGroup} x {rigid, elastic}. The module's own dev cluster
has 4 HGX nodes of 8 GPUs beside 2 GB200 NVL72 racks (36 trays of 4 GPUs), JobSet's controller and the gang
API (``scheduling.k8s.io``, served with its gates, as ``up --gang-api`` does; no kube-scheduler: the pods ask
for ours). It is its own because the gang API changes what the Job controller does for every Indexed Job.

Each combination the operator supports is placed, then a node, a GPU or a tray under it fails, and the
outcome its failure policy says is read back from the API (docs/pod-groups.md "Every kind of gang"):

- ``maxRestarts`` reached: ``Failed``, condition ``Failed`` reason ``GaveUp``, the limit named;
- ``onUnplaceable: Fail`` with no room left to repair (the gang's node filter admits no free node or tray):
  ``Failed``, reason ``GaveUp``, "no room to repair";
- elastic, no room to repair: one replica dropped, the others kept where they are, no restart counted.

A combination it does not support is refused where the user sees why: an elastic pod group by the CRD (its
size is its controller's), an elastic Kubernetes PodGroup (``minCount`` below its pods) on the PodGroup's own
scheduling condition, and an elastic job whose TP groups need NVLink across trays by its ``Failed`` condition.

To choose a group's failure policy a case creates its adopting ParallelJob first (a pod group has no policy of its
own to declare); the native tray group is adopted by the operator under the default policy. Every case deletes
what it made and heals what it broke (``gangscene.Scene``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, wait_for
from tests.e2e.nvl72_e2e.conftest import HGX_SHAPE, RACKS
from tests.e2e.nvl72_e2e.gangscene import (
    HGX_LEAF,
    TRAINER,
    Scene,
    adopting,
    domain_of,
    dropped,
    gave_up,
    indexed_job,
    jobset_on_trays,
    native_group,
    pod_spec,
    running,
    uids,
)
from tests.e2e.sessioncluster import session_cluster
from tests.timings import record_time

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import COMPLETION_INDEX_KEY, NODE_RANK_ANNOTATION
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status

pytestmark = pytest.mark.e2e
REPAIRS = "paralleljob_repair_chains_total"  # chains that put pods into a running gang (Lanes.repairing)


# ---- the module's cluster (overrides the NVL72 suite's session cluster of the same names) -----------------
@pytest.fixture(scope="module")
def nvl72_cluster(pytestconfig: pytest.Config) -> Iterator[DevCluster]:
    started = time.monotonic()
    with session_cluster(
        pytestconfig,
        "e2e-gangs-",
        HGX_SHAPE,
        "PARALLELJOB_E2E_GANGS_CLUSTER",
        nvl72_racks=RACKS,
        gang_api=True,
        controllers=("jobset",),
    ) as cluster:
        record_time("gang matrix: mixed cluster with the gang API and JobSet up", time.monotonic() - started)
        yield cluster


@pytest.fixture(scope="module")
def nvl72_kube(nvl72_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(nvl72_cluster.kubeconfig, nvl72_cluster.shape) as session:
        yield session


@pytest.fixture
def scene(nvl72_kube: KubeSession, nvl72_pjs: Jobs) -> Iterator[Scene]:
    made = Scene(nvl72_kube, nvl72_pjs)
    try:
        yield made
    finally:
        try:
            made.remove_all()
        finally:
            made.heal()


# ---- the cases ---------------------------------------------------------------------------------------------
def hgx_parallel_job_rigid(scene: Scene) -> None:
    """TP8 x DP4 fills the 4 HGX nodes its filter admits; a node goes NotReady: no room, onUnplaceable: Fail."""
    template = {"spec": {"nodeSelector": HGX_LEAF, "containers": [TRAINER]}}
    scene.pjs.create("rigid", 8, 1, 4, template=template, failurePolicy={"onUnplaceable": "Fail"})
    status = running(scene, "rigid", "HGX nodes")
    scene.node_down(status["placement"]["pods"][0]["node"])
    gave_up(scene, "rigid", "no room to repair", "NodeFailure")
    wait_for("the failed job's pods deleted", lambda: not scene.pjs.live_pods("rigid"), timeout_s=60)


def hgx_parallel_job_elastic(scene: Scene) -> None:
    """TP8 x 4 replicas (min 2) on the 4 HGX nodes; a GPU fails with no room left: its replica is dropped."""
    body = Jobs.manifest("elastic", 8, 1, 4, template={"spec": {"nodeSelector": HGX_LEAF, "containers": [TRAINER]}})
    body["spec"]["parallelism"].update(minData=2, maxData=4)
    scene.pjs.create_raw(body)
    status = running(scene, "elastic", "HGX nodes")
    before = uids(scene, "elastic")
    victim = status["placement"]["pods"][1]
    scene.break_gpu(victim["node"], victim["gpuIndices"][0])
    dropped(scene, "elastic", 4)
    assert uids(scene, "elastic") == {n: u for n, u in before.items() if n != victim["name"]}, "survivors stay"


def hgx_pod_group_rigid(scene: Scene) -> None:
    """An Indexed Job of 2 TP8 pods, maxRestarts 0 on its adopting ParallelJob: a GPU fails, the group fails."""
    adopting(scene.pjs, "idx", 8, 1, 2, maxRestarts=0)
    indexed_job(scene, "idx", 2, 8, "8x1x2")
    status = running(scene, "idx", "HGX nodes")
    slot = status["placement"]["pods"][0]
    scene.break_gpu(slot["node"], slot["gpuIndices"][0])
    failed = gave_up(scene, "idx", "maxRestarts 0 reached", "GPUFailure")
    assert failed.get("restarts", 0) == 0


def hgx_native_rigid(scene: Scene) -> None:
    """A PodGroup of 4 TP8 pods fills the HGX nodes (a tray holds half a pod); a node goes NotReady: no room,
    onUnplaceable: Fail."""
    adopting(scene.pjs, "llm-workers", 8, 1, 4, onUnplaceable="Fail")
    native_group(scene, "llm", 4, 4, 8, "8x1x4")
    status = running(scene, "llm-workers", "HGX nodes")
    scene.node_down(status["placement"]["pods"][2]["node"])
    gave_up(scene, "llm-workers", "no room to repair", "NodeFailure")


def nvl72_parallel_job_rigid(scene: Scene) -> None:
    """TP16 x DP4 on 16 trays of the clique its filter names; the clique's 2 spare trays broken first, then one
    of the job's: no tray left in the clique, onUnplaceable: Fail (the tray repair honours it)."""
    trays = scene.trays()
    clique = trays["gb200-000"]
    template = {"spec": {"nodeSelector": {cd.CLIQUE_LABEL: clique}, "containers": [TRAINER]}}
    scene.pjs.create("wide", 16, 1, 4, template=template, failurePolicy={"onUnplaceable": "Fail"})
    status = running(scene, "wide", "trays")
    record = record_from_status(status)
    assert record is not None and len(record.trays) == 16
    held = {t.node for t in record.trays}
    for spare in sorted(n for n, c in trays.items() if c == clique and n not in held):
        scene.break_gpu(spare)
    time.sleep(1.0)  # nothing runs on them: the operator only stops counting them free
    scene.break_gpu(record.trays[5].node, 2)
    gave_up(scene, "wide", "no room to repair inside the NVLink cliques", "GPUFailure")


def nvl72_parallel_job_elastic(scene: Scene) -> None:
    """An elastic job never takes a ComputeDomain: TP16 (wider than a tray and than every HGX node) is refused
    with that reason; TP4 replicas each take one tray like a small node, and a tray failing with no tray left
    in the clique its filter names drops one replica."""
    wide = Jobs.manifest("wide-elastic", 16, 1, 2)
    wide["spec"]["parallelism"].update(minData=1, maxData=2)
    scene.pjs.create_raw(wide)
    refused = scene.pjs.wait_phase("wide-elastic", "Failed", timeout_s=60)
    assert "an elastic job is not placed over NVL72 trays" in refused["message"], refused["message"]

    clique = scene.trays()["gb200-018"]
    template = {"spec": {"nodeSelector": {cd.CLIQUE_LABEL: clique}, "containers": [TRAINER]}}
    body = Jobs.manifest("narrow", 4, 1, 18, template=template)
    body["spec"]["parallelism"].update(minData=2, maxData=18)
    scene.pjs.create_raw(body)
    running(scene, "narrow", "tray nodes")
    wait_for("all 18 replicas", lambda: scene.pjs.status("narrow").get("replicas") == 18, timeout_s=60)
    before = uids(scene, "narrow")
    victim = scene.pjs.status("narrow")["placement"]["pods"][3]
    scene.break_gpu(victim["node"], 1)
    dropped(scene, "narrow", 18)
    assert uids(scene, "narrow") == {n: u for n, u in before.items() if n != victim["name"]}, "survivors stay"


def nvl72_pod_group_rigid(scene: Scene) -> None:
    """A JobSet's TP8 over 2 whole trays of one clique with its ComputeDomain, maxRestarts 0 on its adopting
    ParallelJob: a tray's GPU fails, the group fails."""
    adopting(scene.pjs, "js", 8, 1, 1, maxRestarts=0)
    jobset_on_trays(scene, "js", 2, "TP8xPP1xDP1")
    status = running(scene, "js", "trays")
    record = record_from_status(status)
    assert record is not None and len(record.trays) == 2
    clique = record.trays[0].clique
    domain = wait_for("the group's ComputeDomain", lambda: domain_of(scene, "js"), timeout_s=60)
    assert domain["metadata"]["name"] == cd.compute_domain_name("js", clique)

    def bound() -> bool:
        pods = [p for p in scene.pods() if p.spec.node_name]
        return len(pods) == 2 and {p.spec.node_name for p in pods} == {t.node for t in record.trays}

    wait_for("JobSet's pods bound on the trays", bound, timeout_s=90)
    by_rank = {int(p.metadata.annotations[COMPLETION_INDEX_KEY]): p for p in scene.pods()}
    assert {r: p.spec.node_name for r, p in by_rank.items()} == {t.node_rank: t.node for t in record.trays}
    scene.break_gpu(record.trays[1].node, 3)
    failed = gave_up(scene, "js", "maxRestarts 0 reached", "GPUFailure")
    assert failed["lastFailure"]["nodes"] == [record.trays[1].node]


def nvl72_native_rigid(scene: Scene) -> None:
    """A PodGroup of 2 whole-tray pods (TP8, minCount 2: one pod per tray), adopted by the operator under the
    default policy (minimal, maxRestarts 3): placed over 2 trays of one clique with the clique's ComputeDomain; a
    tray's GPU fails, its rank moves to a free tray of the same clique (the domain stays), one restart counted;
    the old pod must go (a bare pod: its user deletes it and makes it again), and the new one is bound there."""
    group = native_group(scene, "nt", 2, 2, 4, "TP8xPP1xDP1", channel="nt-workers-nvlink-channel")
    status = running(scene, group, "trays")
    record = record_from_status(status)
    assert record is not None and len(record.trays) == 2
    domain = wait_for("the group's ComputeDomain", lambda: domain_of(scene, group), timeout_s=60)
    wait_for("the PodGroup scheduled", lambda: scene.pod_group_condition(group).get("status") == "True")
    victim = record.trays[0]
    scene.break_gpu(victim.node, 0)

    def moved() -> dict[str, Any] | None:
        now = scene.pjs.status(group)
        return now if now.get("restarts") == 1 and now.get("lastFailure") else None

    after = wait_for("the broken tray's rank moved", moved, timeout_s=120)
    assert after["lastFailure"]["action"] == "rescheduled" and after["lastFailure"]["nodes"] == [victim.node]
    new = record_from_status(after)
    assert new is not None
    target = next(t for t in new.trays if t.node_rank == victim.node_rank)
    assert target.node != victim.node and target.clique == victim.clique, target
    assert (domain_of(scene, group) or {}).get("metadata", {}).get("name") == domain["metadata"]["name"], "same clique"
    scene.pjs.wait_events(group, {"PodMustGo"})
    repairs = scene.pjs.operator.sample(REPAIRS)
    old = f"{group}-{victim.node_rank}"
    scene.kube.run(scene.kube.core.delete_namespaced_pod(old, scene.ns, grace_period_seconds=0))
    wait_for("the old pod gone", lambda: all(p.metadata.name != old for p in scene.pods()), timeout_s=60)
    spec = {**pod_spec(4, "nt-workers-nvlink-channel"), "schedulingGroup": {"podGroupName": group}}
    body = {"metadata": {"name": old, "annotations": {NODE_RANK_ANNOTATION: str(victim.node_rank)}}, "spec": spec}
    scene.kube.run(scene.kube.core.create_namespaced_pod(scene.ns, body))
    scene.pjs.wait_phase(group, "Running", timeout_s=120)
    rebound = scene.kube.run(scene.kube.core.read_namespaced_pod(old, scene.ns))
    assert rebound.spec.node_name == target.node
    # binding the new pod into the running gang held the other chains back, as a ParallelJob's repair does
    wait_for("the rebind counted as a repair", lambda: scene.pjs.operator.sample(REPAIRS) > repairs, timeout_s=30)


def pod_group_elastic(layout: str) -> Callable[[Scene], None]:
    def case(scene: Scene) -> None:
        """An adopted pod group's size is its controller's: the API refuses an elastic one, saying so."""
        tp = 8
        body = Jobs.manifest(f"{layout}-group", tp, 1, 2, podGroup=f"{layout}-group")
        del body["spec"]["template"]
        body["spec"]["parallelism"].update(minData=1, maxData=2)
        with pytest.raises(ApiException) as refused:
            scene.pjs.create_raw(body)
        assert refused.value.status == 422
        assert "a pod group is sized by its controller" in str(refused.value.body), refused.value.body

    return case


def native_elastic(layout: str) -> Callable[[Scene], None]:
    def case(scene: Scene) -> None:
        """A PodGroup whose gang is smaller than its pods (minCount below them: kube-scheduler's elastic gang) is
        not placed, and the PodGroup's scheduling condition says why; nothing of it is bound."""
        if layout == "hgx":
            group = native_group(scene, "grow", 1, 2, 8, "8x1x2")
        else:
            group = native_group(scene, "grow", 1, 2, 4, "TP8xPP1xDP1", channel="grow-workers-nvlink-channel")

        def refused() -> dict[str, Any] | None:
            condition = scene.pod_group_condition(group)
            return condition if condition.get("reason") == "Unschedulable" else None

        condition = wait_for("the PodGroup says why it is not placed", refused, timeout_s=60)
        assert condition["status"] == "False"
        assert condition["message"].startswith(f"paralleljob-scheduler does not place this PodGroup: PodGroup {group}")
        assert "gang.minCount 1 is not" in condition["message"] and "an elastic gang" in condition["message"]
        assert not any(p.spec.node_name for p in scene.pods())
        with pytest.raises(ApiException) as missing:
            scene.pjs.get(group)
        assert missing.value.status == 404

    return case


CASES: dict[str, Callable[[Scene], None]] = {
    "hgx-parallel_job-rigid": hgx_parallel_job_rigid,
    "hgx-parallel_job-elastic": hgx_parallel_job_elastic,
    "hgx-pod_group-rigid": hgx_pod_group_rigid,
    "hgx-pod_group-elastic": pod_group_elastic("hgx"),
    "hgx-native-rigid": hgx_native_rigid,
    "hgx-native-elastic": native_elastic("hgx"),
    "nvl72-parallel_job-rigid": nvl72_parallel_job_rigid,
    "nvl72-parallel_job-elastic": nvl72_parallel_job_elastic,
    "nvl72-pod_group-rigid": nvl72_pod_group_rigid,
    "nvl72-pod_group-elastic": pod_group_elastic("nvl72"),
    "nvl72-native-rigid": nvl72_native_rigid,
    "nvl72-native-elastic": native_elastic("nvl72"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_kind_of_gang_meets_its_failure_policy_or_is_refused_with_a_reason(case: str, scene: Scene) -> None:
    started = time.monotonic()
    CASES[case](scene)
    record_time(f"gang matrix: {case}", time.monotonic() - started)

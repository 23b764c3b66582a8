"""What the operator keeps of a ParallelJob (edge/parse/slim.py ``slim_job``): parsed exactly as the whole body (but for
``kubectl apply``'s copy of the manifest), idempotent, without managed fields, and with the parts equal across
jobs shared; a shared pod template is never changed by building pods from it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from paralleljob.k8s.edge.parse.slim import LAST_APPLIED, Sharing, slim_job
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.manifests import PodParts, pod_from_template
from paralleljob.k8s.view.store import ObjectStore, Version
from tests.bench.job_memory import fields_v1, managed_fields
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def as_served(body: dict[str, Any], applied: bool = True) -> dict[str, Any]:
    """``body`` as the API server returns it: managed fields for the create and the status update, and the
    annotation ``kubectl apply`` leaves."""
    out = json.loads(json.dumps(body))  # fresh, as decoded from the wire (str enums become plain strings)
    sent = {
        "metadata": {k: v for k, v in out["metadata"].items() if k in ("labels", "annotations")},
        "spec": out["spec"],
    }
    out["metadata"]["managedFields"] = managed_fields(sent, out.get("status") or {}, "2026-11-27T10:00:00Z")
    if applied:
        manifest = {
            "apiVersion": out["apiVersion"],
            "kind": out["kind"],
            "metadata": {"name": out["metadata"]["name"]},
            "spec": out["spec"],
        }
        out["metadata"]["annotations"] = {
            **(out["metadata"].get("annotations") or {}),
            LAST_APPLIED: json.dumps(manifest) + "\n",
        }
    return out


def without_last_applied(body: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["metadata"]["annotations"] = {
        k: v for k, v in (out["metadata"].get("annotations") or {}).items() if k != LAST_APPLIED
    }
    return out


def every_kind_of_job() -> list[dict[str, Any]]:
    """Jobs in each phase the operator writes (Running with a placement, Queued, Succeeded, invalid), plus
    labels, annotations, owners, an elastic range and a pod group, as a settled cluster leaves them."""
    fc = FakeCluster([node(f"gpu-node-{i}") for i in range(2)])
    fc.add_job(paralleljob("llm", 2, 2, 2))
    fc.add_job(paralleljob("big", 8, 2, 2))  # never fits: Failed
    fc.add_job(paralleljob("waits", 2, 1, 8))  # fits once llm is gone: Queued
    fc.add_job(paralleljob("bad", 3, 1, 1, extra_spec={"costModel": "nope"}))
    fc.add_job(
        paralleljob(
            "flex",
            1,
            1,
            2,
            extra_spec={"parallelism": {"tensor": 1, "pipeline": 1, "data": 2, "minData": 1, "maxData": 4}},
        )
    )
    fc.settle(4)
    bodies = [copy.deepcopy(b) for b in fc.jobs.values()]
    labelled = copy.deepcopy(bodies[0])
    labelled["metadata"].update(
        name="labelled",
        labels={"team": "a"},
        annotations={"note": "x", "paralleljob.dev/last-checkpoint": "3"},
        ownerReferences=[{"kind": "JobSet", "name": "js", "uid": "u-1", "controller": True}],
    )
    group = paralleljob("grouped", 1, 1, 2, extra_spec={"podGroup": "grouped"})
    del group["spec"]["template"]
    done = copy.deepcopy(bodies[0])
    done["metadata"]["name"] = "done"
    done["status"] = {**done["status"], "phase": "Succeeded"}
    done["spec"]["ttlSecondsAfterFinished"] = 60
    return [*bodies, labelled, group, done]


def test_a_slimmed_job_parses_as_the_whole_body() -> None:
    bodies = every_kind_of_job()
    phases = {(b.get("status") or {}).get("phase") for b in bodies}
    assert {"Running", "Queued", "Succeeded", "Failed"} <= phases, phases
    for body in bodies:
        served = as_served(body)
        slim = slim_job(served, Sharing())
        assert parse_job(slim) == parse_job(without_last_applied(served)), body["metadata"]["name"]
        assert "managedFields" not in slim["metadata"]
        assert LAST_APPLIED not in (slim["metadata"].get("annotations") or {})
        assert slim_job(slim, Sharing()) == slim  # idempotent
        expected = without_last_applied(served)
        del expected["metadata"]["managedFields"]
        assert slim == expected  # all else kept, equal (shared parts are equal copies)


def test_a_job_without_the_annotation_parses_exactly_as_it_came() -> None:
    for body in every_kind_of_job():
        served = as_served(body, applied=False)
        assert parse_job(slim_job(served, Sharing())) == parse_job(served)


def test_jobs_from_one_manifest_share_their_template_and_policy() -> None:
    sharing = Sharing()
    one = slim_job(as_served(paralleljob("one", 2, 1, 2, queue="q1")), sharing)
    two = slim_job(as_served(paralleljob("two", 2, 1, 2, queue="q2")), sharing)
    assert one["spec"]["template"] is two["spec"]["template"]
    assert one["spec"]["failurePolicy"] is two["spec"]["failurePolicy"]
    assert one["spec"]["parallelism"] is two["spec"]["parallelism"]
    assert one["spec"] is not two["spec"]  # they differ in their queue
    assert one["metadata"] is not two["metadata"]
    assert parse_job(one).request.template is parse_job(two).request.template  # type: ignore[union-attr]


def test_sharing_tells_types_apart_and_forgets_the_least_recent() -> None:
    sharing = Sharing(capacity=5)
    whole = sharing.share({"preemptible": 1, "gpus": [1]})
    assert sharing.share({"preemptible": True, "gpus": [1]})["preemptible"] is True
    assert type(sharing.share({"preemptible": 1.0, "gpus": [1]})["preemptible"]) is float
    assert sharing.share({"preemptible": 1, "gpus": [1]}) is whole
    for i in range(10):
        sharing.share({"n": i})
    assert len(sharing) == 5
    assert sharing.share({"preemptible": 1, "gpus": [1]}) is not whole  # forgotten: an equal new copy
    assert sharing.share({"preemptible": 1, "gpus": [1]}) == whole


def test_building_pods_never_changes_a_shared_template() -> None:
    sharing = Sharing()
    template = {
        "metadata": {"labels": {"app": "train"}, "annotations": {"a": "1"}},
        "spec": {
            "nodeSelector": {"pool": "a"},
            "containers": [
                {
                    "name": "train",
                    "image": "t:1",
                    "env": [{"name": "MASTER_ADDR", "value": "x"}, {"name": "K", "value": "v"}],
                    "resources": {"limits": {"memory": "8Gi"}, "requests": {"cpu": "4"}},
                },
                {"name": "side", "image": "s:1", "resources": {"limits": {"cpu": "1"}}},
            ],
        },
    }
    bodies = [paralleljob(name, 2, 1, 2, extra_spec={"template": copy.deepcopy(template)}) for name in ("a", "b")]
    jobs = [parse_job(slim_job(as_served(b), sharing)) for b in bodies]
    requests = [job.request for job in jobs]
    assert requests[0] is not None and requests[1] is not None
    shared = requests[0].template
    assert shared is requests[1].template
    before = copy.deepcopy(shared)
    pods = [
        pod_from_template(
            job,
            request,
            PodParts(
                f"{job.name}-0", {"l": job.name}, {"n": job.name}, [{"name": "MASTER_ADDR", "value": job.name}], 2
            ),
        )
        for job, request in zip(jobs, requests, strict=True)
        if request is not None
    ]
    for pod in pods:
        pod["spec"]["containers"][0]["env"].append({"name": "LATER", "value": "1"})
        pod["metadata"]["labels"]["later"] = "1"
    assert shared == before == template
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pods[0]["spec"]["schedulerName"] and "schedulerName" not in shared["spec"]


def test_managed_fields_are_written_as_the_api_server_does() -> None:
    fields = fields_v1({"conditions": [{"type": "Placed", "status": "True"}], "phase": "Running"})
    assert fields == {
        ".": {},
        "f:conditions": {".": {}, 'k:{"type":"Placed"}': {".": {}, "f:type": {}, "f:status": {}}},
        "f:phase": {},
    }


def test_jobs_from_one_manifest_share_their_parsed_parts() -> None:
    one, two = (parse_job(as_served(paralleljob(name, 2, 1, 2, queue=name))) for name in ("one", "two"))
    assert one.request is not None and two.request is not None
    assert one.request.spec.model is two.request.spec.model
    assert one.request.failure is two.request.failure
    assert one.request.checkpoint is two.request.checkpoint
    assert one.request.constraints is two.request.constraints
    other = parse_job(as_served(paralleljob("three", 2, 1, 2, max_restarts=7)))
    assert other.request is not None and other.request.failure.max_restarts == 7
    assert one.labels == {} and one.labels is two.labels


def test_a_relisted_unchanged_job_is_the_stored_body() -> None:
    store = ObjectStore(parse_job, slim=slim_job)
    body = as_served(paralleljob("one", 2, 1, 2))
    store.upsert(copy.deepcopy(body))
    stored = store.body("ns", "one")
    assert store.slim_listed(copy.deepcopy(body)) is stored  # a re-list holds no second copy of it
    newer = copy.deepcopy(body)
    newer["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    newer["spec"]["priority"] = 5
    listed = store.slim_listed(newer)
    assert listed is not stored and listed == slim_job(newer)
    store.replace_all([listed], "999999", slimmed=True)
    job = store.get("ns", "one")
    assert job is not None and job.request is not None and job.request.priority == 5


def test_a_store_without_bodies_relists_an_unchanged_job_as_its_own_version() -> None:
    store = ObjectStore(parse_job, slim=slim_job, keep_bodies=False)
    body = as_served(paralleljob("one", 2, 1, 2))
    store.upsert(copy.deepcopy(body))
    job = store.get("ns", "one")
    listed = store.slim_listed(copy.deepcopy(body))
    assert isinstance(listed, Version) and store.slim_listed(copy.deepcopy(body)) is listed  # nothing new kept
    store.replace_all([listed], "999999", slimmed=True)
    assert store.get("ns", "one") is job, "an unchanged job is not parsed again"
    newer = copy.deepcopy(body)
    newer["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    newer["spec"]["priority"] = 5
    assert store.slim_listed(newer) == slim_job(newer)
    store.replace_all([store.slim_listed(newer)], "999999", slimmed=True)
    changed = store.get("ns", "one")
    assert changed is not None and changed.request is not None and changed.request.priority == 5
    assert changed.resource_version == newer["metadata"]["resourceVersion"]
    with pytest.raises(TypeError):
        store.body("ns", "one")


def test_a_store_without_bodies_takes_one_version_of_a_job_once() -> None:
    store = ObjectStore(parse_job, slim=slim_job, keep_bodies=False)
    body = as_served(paralleljob("one", 2, 1, 2))
    assert store.upsert(copy.deepcopy(body))
    job = store.get("ns", "one")
    assert not store.upsert(copy.deepcopy(body)), "the same version again (a write's response, then its watch event)"
    assert store.get("ns", "one") is job
    older = copy.deepcopy(body)
    older["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) - 1)
    older["spec"]["priority"] = 9
    assert not store.upsert(older) and store.get("ns", "one") is job, "an older version never replaces it"
    assert store.remove(body) and store.get("ns", "one") is None and len(store) == 0
    assert not store.upsert(copy.deepcopy(body)), "gone stays gone"

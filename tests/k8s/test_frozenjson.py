"""Job statuses kept as read-only records (edge/parse/frozenjson.py, slim_job): they read and compare like the
dicts they came from, and what the operator writes from them is plain JSON."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from paralleljob.core.lifecycle import Event, Phase
from paralleljob.k8s.edge.parse.frozenjson import JsonRecord, record
from paralleljob.k8s.edge.parse.slim import Sharing, slim_job
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.status import StatusDraft
from tests.k8s.factories import paralleljob

CONDITION = {
    "type": "Placed",
    "status": "False",
    "reason": "Waiting",
    "message": "waiting behind the blocked head of queue q1 (strict FIFO)",
    "lastTransitionTime": "2026-11-27T10:00:00Z",
    "observedGeneration": 1,
}


def queued(name: str, stamp: str = "2026-11-27T10:00:00Z") -> dict[str, Any]:
    status = {
        "observedGeneration": 1,
        "phase": "Queued",
        "conditions": [{**CONDITION, "type": "Accepted", "status": "True", "reason": "Valid"}, dict(CONDITION)],
        "reason": "Queued",
        "message": "waits",
        "queuedAt": stamp,
        "placement": {"epoch": 0, "pods": []},
    }
    return json.loads(json.dumps(paralleljob(name, 2, 1, 2, status=status)))


def test_a_record_reads_and_compares_as_its_dict() -> None:
    one = record(CONDITION)
    assert one == CONDITION and one == CONDITION and one == record(dict(CONDITION))
    assert one != {**CONDITION, "reason": "Other"} and one != {k: v for k, v in CONDITION.items() if k != "type"}
    assert list(one) == list(CONDITION) and dict(one) == CONDITION and len(one) == 6
    assert one["reason"] == "Waiting" and one.get("nope") is None and one.get("nope", 3) == 3
    assert "reason" in one and "nope" not in one
    with pytest.raises(KeyError):
        one["nope"]
    with pytest.raises(TypeError):
        one["reason"] = "x"  # type: ignore[index]
    assert repr(one) == repr(CONDITION)


def test_a_slimmed_jobs_status_and_conditions_are_records_that_parse_as_the_dicts() -> None:
    body = queued("one")
    slim = slim_job(copy.deepcopy(body), Sharing())
    assert isinstance(slim["status"], JsonRecord)
    assert all(isinstance(c, JsonRecord) for c in slim["status"]["conditions"])
    assert isinstance(slim["status"]["placement"], dict), "nested objects other than conditions stay dicts"
    assert parse_job(slim) == parse_job(body) and slim["status"] == body["status"]


def test_equal_statuses_of_two_jobs_are_one_record() -> None:
    sharing = Sharing()
    one, two = slim_job(queued("one"), sharing), slim_job(queued("two"), sharing)
    assert one["status"] is two["status"]
    other = slim_job(queued("three", "2026-11-27T10:00:01Z"), sharing)
    assert other["status"] is not one["status"] and other["status"] != one["status"]
    assert other["status"]["conditions"][1]["reason"] == "Waiting"


def test_a_draft_from_a_record_status_writes_plain_json() -> None:
    body = queued("one")
    job, plain = parse_job(slim_job(copy.deepcopy(body), Sharing())), parse_job(body)
    patches = []
    for each in (job, plain):
        draft = StatusDraft(each.status.raw, Phase.QUEUED, 2)
        draft.apply(Event.ADMITTED, "", "placed", "2026-11-27T10:05:00Z")
        draft.set(gpus=4)
        assert draft.changed()
        patches.append(json.loads(json.dumps(draft.merge_patch())))  # json.dumps refuses a record
    assert patches[0] == patches[1] and patches[0]["phase"] == "Placing"
    assert [c["type"] for c in patches[0]["conditions"]] == ["Accepted", "Placed", "Bound"]
    unchanged = StatusDraft(job.status.raw, job.phase, job.generation)
    assert not unchanged.changed() and unchanged.merge_patch() == {}


def test_a_draft_is_changed_exactly_when_its_status_differs_as_json() -> None:
    # changed() settles untouched fields by identity; whatever the edit, it must agree with plain equality
    body = paralleljob("j", 2, 1, 2)
    body["status"] = {"phase": "Queued", "reason": "Waiting", "gpus": 4, "conditions": [dict(CONDITION)]}
    job = parse_job(slim_job(copy.deepcopy(body), Sharing()))
    edits: list[tuple[str, Any]] = [
        ("gpus", 4),  # the same value, a new object: unchanged
        ("gpus", 8),
        ("conditions", [dict(CONDITION)]),  # rebuilt, equal: unchanged
        ("conditions", [{**CONDITION, "message": "another"}]),
        ("reason", None),  # removed
        ("message", "new"),  # added
    ]
    for key, value in edits:
        draft = StatusDraft(job.status.raw, job.phase, job.generation)
        if value is None:
            draft.data.pop(key)
        else:
            draft.data[key] = value
        plain = json.loads(json.dumps(draft.data, default=dict))  # records as the plain JSON they stand for
        expected = plain != body["status"]
        assert draft.changed() is expected, (key, value)
    draft = StatusDraft(job.status.raw, job.phase, job.generation)
    draft.data.pop("gpus")
    draft.data["other"] = 4  # as many fields, one of them new
    assert draft.changed()

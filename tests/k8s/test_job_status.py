"""A ParallelJob's status is parsed once into a frozen JobStatus: what each field reads as when the API
object lacks it or holds garbage (the defaults live in one place, ``k8s/edge/status/jobstatus.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.jobstatus import JobStatus, parse_status
from tests.k8s.factories import paralleljob


def test_a_job_without_a_status_reads_as_a_new_pending_job() -> None:
    body = paralleljob("j")
    body.pop("status", None)
    body["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    job = parse_job(body)
    assert job.status == JobStatus()
    assert (job.phase, job.restarts, job.placement_epoch, job.ever_ran) == (Phase.PENDING, 0, 0, False)
    assert job.queued_at == "2026-01-01T00:00:00Z"  # never queued: its creation time


def test_garbage_fields_take_the_defaults() -> None:
    status = parse_status(
        {"phase": "Exploded", "restarts": "three", "placementEpoch": True, "conditions": "none", "queuedAt": None},
        record_epoch=None,
    )
    assert status == dataclasses.replace(JobStatus(), raw=status.raw)


def test_the_placement_epoch_falls_back_to_the_records_then_zero() -> None:
    assert parse_status({"placementEpoch": 4}, record_epoch=2).placement_epoch == 4
    assert parse_status({}, record_epoch=2).placement_epoch == 2  # written by an operator before placementEpoch
    assert parse_status({}, record_epoch=None).placement_epoch == 0


def test_fields_and_conditions_are_read_once() -> None:
    placed = {"type": "Placed", "status": "True", "reason": "Placed"}
    status = parse_status(
        {
            "phase": "Running",
            "restarts": 2,
            "queuedAt": "2026-01-01T00:00:05Z",
            "startTime": "2026-01-01T00:00:09Z",
            "conditions": [placed, "not a condition"],
        },
        record_epoch=None,
    )
    assert (status.phase, status.restarts, status.ever_ran) == (Phase.RUNNING, 2, True)
    assert (status.queued_at, status.start_time) == ("2026-01-01T00:00:05Z", "2026-01-01T00:00:09Z")
    assert status.conditions == (placed,)
    assert status.condition("Placed") == placed and status.condition("Accepted") == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.restarts = 3  # type: ignore[misc]

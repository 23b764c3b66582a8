"""The status corpus covers every field the operator writes (so the real API server's round trip in
``tests/e2e/test_status_roundtrip_e2e.py`` checks them all), and the check that reads a status write
back finds what a CRD pruned."""

from __future__ import annotations

from paralleljob.k8s.edge.status.statuscheck import dropped_fields
from tests.k8s.statuscorpus import statuses, written_status_fields


def test_the_scan_finds_the_fields_of_every_kind_of_write() -> None:
    fields = written_status_fields()
    # one from each writer: the lifecycle, admission, repair, move-back, preemption
    assert {"phase", "conditions", "placement", "lastFailure", "reoptimization", "lastMigration"} <= fields
    assert {"preemption", "queuedAt", "placementEpoch", "completionTime"} <= fields
    assert {"drain", "lastDrain"} <= fields  # a drain's checkpoint request and its move


def test_every_status_field_the_operator_writes_is_in_a_scenario() -> None:
    written: set[str] = set()
    nested: dict[str, set[str]] = {}
    for status in statuses():
        written |= set(status)
        for key, value in status.items():
            if isinstance(value, dict):
                nested.setdefault(key, set()).update(value)
    missing = written_status_fields() - written
    assert not missing, f"status fields no scenario in tests/k8s/statuscorpus.py writes: {sorted(missing)}"
    assert {"proposedAt", "checkedAt", "bestCostMs"} <= nested["reoptimization"]
    assert {"costBeforeMs", "costAfterMs", "podsMoved"} <= nested["lastMigration"]
    assert {"deadline", "requestedAt", "nodes"} <= nested["drain"]
    assert {"kind", "action", "costBeforeMs", "costAfterMs"} <= nested["lastDrain"]
    assert {"createdAt", "heldNodes", "moves", "lostGpuSeconds"} <= nested["movePlan"]
    assert {"for", "lostGpuSeconds"} <= nested["lastRoomMove"] and {"answer"} <= nested["moveCheck"]


def test_dropped_fields_names_what_the_server_did_not_keep() -> None:
    patch = {"phase": "Running", "reoptimization": {"checkedAt": 1.5}, "placement": None, "restarts": 1}
    stored = {"phase": "Running", "restarts": 1.0, "conditions": []}
    assert dropped_fields(patch, stored) == ["status.reoptimization"]
    assert dropped_fields({"lastFailure": {"kind": "X", "podz": ["a"]}}, {"lastFailure": {"kind": "X"}}) == [
        "status.lastFailure.podz"
    ]
    assert dropped_fields({"conditions": [{"type": "A", "x": 1}]}, {"conditions": [{"type": "A"}]}) == [
        "status.conditions"
    ]
    assert dropped_fields({"worth": True}, {"worth": 1}) == ["status.worth"]
    assert dropped_fields({"a": {"b": 2}}, {"a": {"b": 2, "default": 0}}) == []

"""The failure policy's defaults live once, in core.failure.repair.FailurePolicy: the CRD's schema defaults (what the
API server fills in) and the operator's parsing of a spec that leaves the field out must agree with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import DEFAULT_FAILURE_POLICY, OnUnplaceable, ReoptimizePolicy
from paralleljob.k8s.edge.parse.specs import parse_job
from tests.k8s.factories import paralleljob

ROOT = Path(__file__).resolve().parents[2]


def _failure_policy_schema(crd: Path) -> dict[str, Any]:
    doc = yaml.safe_load(crd.read_text())
    version = next(v for v in doc["spec"]["versions"] if v.get("storage"))
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema: dict[str, Any] = spec["properties"]["failurePolicy"]["properties"]
    return schema


def test_the_crds_defaults_and_enums_are_the_cores() -> None:
    for crd in (ROOT / "crds" / "paralleljob.yaml", ROOT / "charts" / "paralleljob" / "crds" / "paralleljob.yaml"):
        schema = _failure_policy_schema(crd)
        assert schema["strategy"]["default"] == DEFAULT_FAILURE_POLICY.strategy.value, crd
        assert schema["maxRestarts"]["default"] == DEFAULT_FAILURE_POLICY.max_restarts, crd
        assert schema["onUnplaceable"]["default"] == DEFAULT_FAILURE_POLICY.on_unplaceable.value, crd
        assert schema["reoptimize"]["default"] == DEFAULT_FAILURE_POLICY.reoptimize.value, crd
        assert set(schema["strategy"]["enum"]) == {s.value for s in RecoveryStrategy}, crd
        assert set(schema["onUnplaceable"]["enum"]) == {o.value for o in OnUnplaceable}, crd
        assert set(schema["reoptimize"]["enum"]) == {r.value for r in ReoptimizePolicy}, crd


def test_a_spec_without_a_failure_policy_gets_the_cores_defaults() -> None:
    body = paralleljob("j")
    del body["spec"]["failurePolicy"]
    assert parse_job(body).request.failure == DEFAULT_FAILURE_POLICY
    body["spec"]["failurePolicy"] = {"onUnplaceable": "Fail"}
    parsed = parse_job(body).request.failure
    assert parsed.on_unplaceable is OnUnplaceable.FAIL and parsed.max_restarts == DEFAULT_FAILURE_POLICY.max_restarts

"""The bounds on moving jobs to free room live once, in core.moves.MoveBounds: the ParallelJobQueue CRD's
schema defaults, the operator's parse of a queue with no ``spec.moves`` (and of a partial one), and the
simulator's ``ours-nvl72-moves`` policy must all be its defaults, so both shells move under the same rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from paralleljob.core.moves import MoveBounds
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_queue
from paralleljob.sim.run.policies import placement_policy

ROOT = Path(__file__).resolve().parents[2]


def _moves_schema(crd: Path) -> dict[str, Any]:
    doc = yaml.safe_load(crd.read_text())
    version = next(v for v in doc["spec"]["versions"] if v.get("storage"))
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["moves"]
    return schema["properties"]


def test_the_queue_crds_defaults_are_the_cores() -> None:
    chart = ROOT / "charts" / "paralleljob" / "crds" / "paralleljobqueue.yaml"
    for crd in (ROOT / "crds" / "paralleljobqueue.yaml", chart):
        schema = _moves_schema(crd)
        assert schema["perHour"]["default"] == MoveBounds().max_moves_per_hour, crd
        assert schema["maxExtraCostRatio"]["default"] == MoveBounds().max_extra_cost_ratio, crd


def test_a_queue_without_moves_and_the_simulators_policy_move_under_the_same_bounds() -> None:
    assert parse_queue({"metadata": {"name": "q"}, "spec": {}}).moves == MoveBounds() == QueueInfo("q").moves
    assert placement_policy("ours-nvl72-moves").moves == MoveBounds()
    partial = parse_queue({"metadata": {"name": "q"}, "spec": {"moves": {"maxExtraCostRatio": 0.25}}}).moves
    assert partial.max_extra_cost_ratio == 0.25 and partial.max_moves_per_hour == MoveBounds().max_moves_per_hour
    refused = parse_queue({"metadata": {"name": "q"}, "spec": {"moves": {"perHour": -1, "maxExtraCostRatio": True}}})
    assert refused.moves == MoveBounds(), "a value the CRD refuses keeps the default"

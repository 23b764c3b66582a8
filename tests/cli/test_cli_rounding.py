"""Costs are shown rounded wherever people read them (``kubectl get pj``'s Cost-ms column, ``status``,
``describe``), while the status keeps the precision the operator's decisions compare."""

from __future__ import annotations

from pathlib import Path

import yaml

from paralleljob.core.timing.cost import CostBreakdown
from paralleljob.k8s.edge.status.records import cost_from_status, cost_to_status, rounded_ms

CRD = Path(__file__).parents[2] / "crds" / "paralleljob.yaml"


def test_rounded_ms_keeps_what_a_reader_needs() -> None:
    assert rounded_ms(16201.537911) == 16201.54 and str(rounded_ms(16201.537911)) == "16201.54"
    assert rounded_ms(233.710821) == 233.71
    assert rounded_ms(0.004123456) == 0.00412 and rounded_ms(0.5) == 0.5 and rounded_ms(0.0) == 0.0


def test_kubectls_cost_column_reads_a_rounded_field_and_the_status_keeps_full_precision() -> None:
    status = cost_to_status(CostBreakdown(1.25, 3.5, 16196.787911, 16201.537911), "megatron")
    version = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]
    (column,) = [c for c in version["additionalPrinterColumns"] if c["name"] == "Cost-ms"]
    field = column["jsonPath"].removeprefix(".status.communicationCost.")
    assert status[field] == 16201.54
    declared = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["communicationCost"]
    assert field in declared["properties"], "the API server would prune an undeclared field"
    back = cost_from_status(status)
    assert back is not None and back.total_ms == 16201.537911

"""``paralleljob bench native`` prints the table docs/benchmarks.md shows (it printed its raw JSON), and the
figures in it are the ones its runs measured: savings per cost model, step times alone, who was costlier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paralleljob.core import JobSpec
from paralleljob.devtools.native_report import HEADER, compare, table
from paralleljob.devtools.native_set import Gang, step_ms

GANGS = [Gang("g0", 4, 2, 2, "seed"), Gang("g1", 8, 1, 2, "megatron"), Gang("g2", 2, 1, 1, "seed")]
DOCS = Path(__file__).parents[2] / "docs" / "benchmarks.md"
SPECS = {g.name: JobSpec(g.name, g.tp, g.pp, g.dp, 10.0) for g in GANGS}


def contended(placed: list[str], half: list[str], median: float, pps: float) -> dict[str, Any]:
    return {"gangs": 3, "placed": len(placed), "placed_names": placed, "half_bound": half,
            "apply_to_bound_median_s": median, "pods_per_second": pps}  # fmt: skip


def measured() -> dict[str, Any]:
    runs = {
        "kube_scheduler": contended(["g0", "g1"], ["g2"], 2.8, 100.0),
        "ours": contended(["g0", "g1", "g2"], [], 1.4, 250.0),
        "kube_scheduler_alone": {"costs_ms": {"g0": 200.0, "g1": 100.0, "g2": 50.0}},
        "ours_alone": {"costs_ms": {"g0": 150.0, "g1": 100.0, "g2": 60.0}},
    }
    return {"sizes": [{"nodes": 500, **runs, "compare": compare(GANGS, runs, SPECS)}]}


def test_the_comparison_splits_the_saving_by_cost_model_and_prices_steps_alone() -> None:
    cmp = measured()["sizes"][0]["compare"]
    assert cmp["alone_mean_comm_ms_on_common"] == {"kube_scheduler": pytest.approx(116.667), "ours": 103.333}
    assert cmp["alone_comm_saving_pct_by_cost_model"] == {"megatron": 0.0, "seed": 16.0}  # 125 -> 105 ms on average
    assert cmp["alone_ours_costlier_on"] == ["g2"]
    ks_step = (step_ms(SPECS["g0"], 200.0) + step_ms(SPECS["g1"], 100.0) + step_ms(SPECS["g2"], 50.0)) / 3
    assert cmp["alone_mean_step_ms_on_common"]["kube_scheduler"] == pytest.approx(ks_step, abs=1e-3)
    assert cmp["pods_per_second_ratio"] == 2.5


def test_the_table_is_the_one_the_docs_show() -> None:
    lines = table(measured()).splitlines()
    assert lines[0] == HEADER
    assert lines[0] in DOCS.read_text()  # the docs' table has these columns
    row = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert row[:6] == [
        "500", "2 / 3 of 3", "1 / 0", "2.8 / 1.4 s", "100.0 / 250.0 (**2.5**)", "116.7 / 103.3 (**11.4%**)",
    ]  # fmt: skip
    assert row[6] == "16.0% / 0.0%" and row[8] == "g2 of 3"

"""The placement benchmark harness runs and stays far from the targets' regression lines.

The recorded numbers live in docs/benchmarks.md (`make bench`); these checks only guard against
order-of-magnitude regressions, with margins wide enough for a noisy shared CI machine.
"""

from __future__ import annotations

import pytest

from paralleljob.bench import render, run


@pytest.mark.parametrize("topology", ["flat", "tree"])
def test_bench_at_1k_gpus(topology):
    result = run(1000, topology, repeat=3, seed=7)
    assert 0.4 <= result.fill_allocated <= 0.55
    assert result.place_ms < 50 and result.infeasible_ms < 5 and result.failure_full_ms < 100
    assert result.model_memory_mb < 5
    assert "| 1,000 |" in render([result])


@pytest.mark.slow
def test_bench_at_10k_gpus_keeps_the_seed_topology_fast():
    result = run(10_000, "flat", repeat=3, seed=7)
    assert result.big_job.startswith("TP8xPP8xDP16")
    assert result.proven_optimal
    assert result.place_ms < 30 and result.infeasible_ms < 1 and result.failure_full_ms < 50


def test_bench_placement_prints_each_row_once(capsys):
    # Issue 21: the rows were printed as they were measured and then again in a full table.
    from paralleljob.cli import main

    assert main(["bench", "placement", "--sizes", "1000", "--topology", "flat", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("| 1,000 |")]) == 1
    assert out.count("| GPUs |") == 1

"""Failure injection: published rates and cause counts, and a Poisson process that matches them."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.failures import (
    Cause,
    FailureConfig,
    FailureProcess,
    Scope,
    load_failure_stats,
    parse_rate,
)
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.trace import TraceJob

DAY = 86_400.0


def test_rates_and_cause_counts_come_from_the_csv(traces: Path) -> None:
    stats = load_failure_stats(traces / "failure_stats.csv")
    assert stats.rates == {"rsc2": 2.34, "llama3": 3.79, "rsc1": 6.5}
    counts = {c.name: c.count for c in stats.causes}
    assert counts["Faulty GPU"] == 148 and counts["GPU HBM3 Memory"] == 72
    assert counts["Software Bug"] == 54 and counts["Network Switch/Cable"] == 35
    assert sum(counts.values()) == 419  # the counts, not the printed percentages
    scopes = {c.name: c.scope for c in stats.causes}
    assert scopes["Faulty GPU"] is Scope.GPU and scopes["NIC"] is Scope.NODE
    assert scopes["NCCL Watchdog Timeouts"] is Scope.SOFTWARE
    assert parse_rate("llama3", stats) == 3.79 and parse_rate("none", stats) == 0.0 and parse_rate("5", None) == 5.0
    with pytest.raises(ValueError):
        parse_rate("often", stats)


def test_poisson_rate_and_cause_mix_within_tolerance() -> None:
    causes = (Cause("Faulty GPU", 148, Scope.GPU), Cause("HBM3", 72, Scope.GPU), Cause("Software", 54, Scope.SOFTWARE))
    nodes, days, rate = 2000, 500.0, 3.79
    process = FailureProcess(FailureConfig(rate, causes), nodes, (8,) * nodes, seed=5)
    failures = []
    now = 0.0
    while True:
        failure = process.next_after(now)
        if failure.time >= days * DAY:
            break
        failures.append(failure)
        now = failure.time
    expected = rate / 1000.0 * nodes * days  # 3,790
    assert abs(len(failures) - expected) < 4 * math.sqrt(expected)  # 4 sigma: about +-6.5 %
    shares = Counter(f.cause for f in failures)
    for cause in causes:
        assert shares[cause.name] / len(failures) == pytest.approx(cause.count / 274, abs=0.03)
    per_node = Counter(f.node for f in failures)
    assert max(per_node.values()) < 10  # uniform over nodes: about 1.9 each
    repairs = [f.repair_s for f in failures if f.scope is Scope.GPU]
    assert sum(repairs) / len(repairs) == pytest.approx(24 * 3600, rel=0.1)


def test_engine_injects_at_the_configured_rate_over_a_long_run() -> None:
    # One job that outlives the horizon keeps the run going; 400 nodes x 200 days at 6.5 -> 520 failures.
    topology = Topology.uniform(400, gpus_per_node=1)
    config = SimConfig(
        failure_rate=6.5, causes=(Cause("Faulty GPU", 1, Scope.GPU),), horizon_s=200 * DAY, gpu_repair_hours=1.0
    )
    simulation = Simulation(topology, [TraceJob("long", 0, 1e9, 1)], config)
    result = simulation.run()
    injected = result.metrics["failures"]["injected"]
    assert abs(injected - 520) < 4 * math.sqrt(520)
    assert result.metrics["gpu_unhealthy_share"] == pytest.approx(injected * 3600 / (400 * 200 * DAY), rel=0.25)

"""Per-team quotas from the trace's tenants: the trace rule, caps that hold, borrowing that the core's
preemption takes back (and only then), the real trace's tenants, and runs without a tenant column."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from paralleljob.cli import main
from paralleljob.core.admit.queueing import QueueSpec
from paralleljob.core.topology import Topology
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.workload.alibaba import read_pods
from paralleljob.sim.workload.quotas import parse_quotas, trace_quotas
from paralleljob.sim.workload.trace import TraceJob

LONG, SHORT = 36_000.0, 3_600.0
GRACE = 120.0  # the core QueuePolicy's default grace period before a preemption


def job(job_id: str, submit: float, duration: float, gpus: int, tenant: str) -> TraceJob:
    return TraceJob(job_id, submit, duration, gpus, tenant, (gpus, 1, 1))


def run(trace: list[TraceJob], quotas: tuple[QueueSpec, ...], queue: str = "core-fair", nodes: int = 2) -> Simulation:
    config = SimConfig(queue=queue, quotas=quotas, check_invariants=True)
    simulation = Simulation(Topology.uniform(nodes), trace, config)
    simulation.run()
    return simulation


def started(simulation: Simulation, job_id: str) -> float:
    start = simulation.jobs[job_id].first_start
    assert start is not None, f"{job_id} never started"
    return start


# ---- the trace rule ------------------------------------------------------------------------------------
def test_trace_rule_floor_then_demand_shares_then_caps() -> None:
    trace = [
        job("a1", 0, 100, 8, "a"),  # 800 GPU-s: share 0.8
        job("b1", 0, 100, 2, "b"),  # 200 GPU-s: share 0.2
        job("c1", 0, 0, 16, "c"),  # no demand, but a 16-GPU job
    ]
    specs = {s.name: s for s in trace_quotas(trace, 64)}
    # floor 8 each, then the 40 GPUs left by demand share: a 8 + 32, b 8 + 8, c 8 + 0
    assert {n: s.guaranteed_gpus for n, s in specs.items()} == {"a": 40, "b": 16, "c": 8}
    # max = 2 x guarantee, within the cluster, never below the largest job
    assert {n: s.max_gpus for n, s in specs.items()} == {"a": 64, "b": 32, "c": 16}
    assert specs["a"].weight == 40 / 64 and specs["c"].weight == 8 / 64
    # borrow 1: no borrowing beyond what the largest job needs
    no_borrow = {s.name: s.max_gpus for s in trace_quotas(trace, 64, borrow=1.0)}
    assert no_borrow == {"a": 40, "b": 16, "c": 16}
    # a floor the cluster cannot give every tenant is cut to an equal split
    small = {s.name: s.guaranteed_gpus for s in trace_quotas(trace, 16)}
    assert small == {"a": 5, "b": 5, "c": 5}


def test_trace_guarantees_never_add_up_to_more_than_the_cluster() -> None:
    rng = random.Random(7)
    for _ in range(200):
        tenants = [f"t{i}" for i in range(rng.randint(1, 12))]
        trace = [
            job(f"j{i}", 0, rng.uniform(0, 1e5), rng.choice((1, 2, 4, 8)), rng.choice(tenants)) for i in range(30)
        ]
        gpus = rng.randint(8, 512)
        specs = trace_quotas(trace, gpus, borrow=rng.uniform(1, 4), floor_gpus=rng.randint(0, 16))
        assert sum(s.guaranteed_gpus for s in specs) <= gpus
        largest = {t: max(j.num_gpus for j in trace if j.tenant == t) for t in {j.tenant for j in trace}}
        assert all(s.max_gpus is not None and s.max_gpus >= largest[s.name] for s in specs)


def test_a_quota_file_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "quotas.csv"
    path.write_text("\ufefftenant,weight,guaranteed,max\na,2,8,16\nb,1,0,\n")
    trace = [job("x", 0, 1, 8, "a"), job("y", 0, 1, 1, "c")]
    specs = parse_quotas(str(path), trace, 16)
    assert specs == (QueueSpec("a", 2.0, 8, 16), QueueSpec("b", 1.0, 0, None))
    with pytest.raises(ValueError, match="above tenant 'a'"):
        parse_quotas(str(path), [job("big", 0, 1, 24, "a")], 32)
    path.write_text("tenant,weight,guaranteed,max\na,1,8,4\n")
    with pytest.raises(ValueError, match=r"quotas.csv:2: .*below its guarantee"):
        parse_quotas(str(path), trace, 16)
    with pytest.raises(ValueError, match="neither none, trace"):
        parse_quotas(str(tmp_path / "absent.csv"), trace, 16)


# ---- caps and borrowing, through the core's admission and preemption ----------------------------------
def test_a_tenant_never_exceeds_its_max_even_on_an_idle_cluster() -> None:
    trace = [job("a1", 0, 1000, 8, "a"), job("a2", 0, 1000, 8, "a")]
    capped = run(trace, (QueueSpec("a", guaranteed_gpus=8, max_gpus=8),))
    assert started(capped, "a1") == 0.0 and started(capped, "a2") == 1000.0  # waits for its own tenant
    assert capped.tenants.peak["a"] == 8
    free = run(trace, ())
    assert started(free, "a2") == 0.0 and free.tenants.peak["a"] == 16  # the cap, not the cluster, held it


def test_a_job_placed_but_not_started_counts_against_its_tenant() -> None:
    # a1 is placed at 0 and starts at 50; a2 arrives at 10, in between. Counting only running jobs would
    # admit it then and put tenant a at 16 GPUs, above its maximum of 8.
    quotas = (QueueSpec("a", guaranteed_gpus=8, max_gpus=8),)
    trace = [job("a1", 0, 1000, 8, "a"), job("a2", 10, 1000, 8, "a")]
    config = SimConfig(queue="core-fair", quotas=quotas, check_invariants=True, start_latency_s=50.0)
    sim = Simulation(Topology.uniform(2), trace, config)
    sim.run()
    assert started(sim, "a1") == 50.0 and started(sim, "a2") == 1050.0 + 50.0
    assert sim.tenants.peak["a"] == 8


def test_borrowed_gpus_are_taken_back_for_a_tenant_within_its_guarantee() -> None:
    # a is guaranteed 8 of 16 GPUs and may borrow to 16: both its jobs start. b (guaranteed 8) arrives at 100:
    # a borrows, b is within its guarantee, so the core preempts one of a's jobs after the grace period.
    quotas = (QueueSpec("a", guaranteed_gpus=8, max_gpus=16), QueueSpec("b", guaranteed_gpus=8, max_gpus=16))
    trace = [job("a1", 0, LONG, 8, "a"), job("a2", 0, LONG, 8, "a"), job("b1", 100, SHORT, 8, "b")]
    sim = run(trace, quotas)
    assert started(sim, "a1") == started(sim, "a2") == 0.0
    assert started(sim, "b1") == 100.0 + GRACE
    assert sum(sim.jobs[j].preemptions for j in ("a1", "a2")) == 1
    # the victim checkpoints in the grace period: the preemption throws no work away
    assert all(sim.jobs[j].lost_work_s == 0.0 for j in ("a1", "a2"))
    tenants = sim._result().metrics["tenants"]
    assert tenants["a"]["peak_gpus"] == 16 and tenants["a"]["quota"]["borrowed_gpu_hours"] > 0
    assert tenants["b"]["quota"]["borrowed_gpu_hours"] == 0
    assert (tenants["a"]["preemptions"], tenants["b"]["preemptions"]) == (1, 0)


def test_without_preemption_a_borrower_keeps_its_gpus() -> None:
    quotas = (QueueSpec("a", guaranteed_gpus=8, max_gpus=16), QueueSpec("b", guaranteed_gpus=8, max_gpus=16))
    trace = [job("a1", 0, LONG, 8, "a"), job("a2", 0, LONG, 8, "a"), job("b1", 100, SHORT, 8, "b")]
    sim = run(trace, quotas, queue="core-fair-backfill")
    assert started(sim, "b1") == LONG
    assert all(j.preemptions == 0 for j in sim.jobs.values())


def test_only_a_tenant_within_its_guarantee_may_reclaim() -> None:
    # Same borrower, but c has no guarantee: it cannot take a's borrowed GPUs back and waits for a job to end.
    quotas = (QueueSpec("a", guaranteed_gpus=8, max_gpus=16), QueueSpec("c", guaranteed_gpus=0, max_gpus=16))
    trace = [job("a1", 0, LONG, 8, "a"), job("a2", 0, LONG, 8, "a"), job("c1", 100, SHORT, 8, "c")]
    sim = run(trace, quotas)
    assert started(sim, "c1") == LONG
    assert all(j.preemptions == 0 for j in sim.jobs.values())


# ---- the real trace ------------------------------------------------------------------------------------
def test_alibaba_tenants_are_its_qos_classes(traces: Path) -> None:
    # The openb pod list has no user column (see ../shared/traces/README.md): the QoS class is the tenant.
    jobs = read_pods(traces / "alibaba2023_openb_pods.csv")
    assert Counter(j.tenant for j in jobs) == {"LS": 4011, "BE": 2948, "Burstable": 99, "Guaranteed": 6}
    specs = {s.name: s for s in trace_quotas(jobs, 192)}
    # GPU-hours: LS 48,309, Burstable 7,459, BE 2,603, Guaranteed 1,286: 8 GPUs each, then 160 by share
    assert {n: (s.guaranteed_gpus, s.max_gpus) for n, s in specs.items()} == {
        "BE": (14, 28),
        "Burstable": (28, 56),
        "Guaranteed": (11, 22),
        "LS": (137, 192),
    }


def test_trace_quotas_hold_on_the_alibaba_slice(traces: Path) -> None:
    jobs = read_pods(traces / "alibaba2023_openb_pods.csv", limit=600)
    topology = Topology.uniform(4)  # 32 GPUs: the first 600 pods queue here
    quotas = trace_quotas(jobs, topology.num_gpus)
    caps = {q.name: q.max_gpus for q in quotas}
    peaks = {}
    for quoted in (quotas, ()):
        config = SimConfig(queue="core-fair", quotas=quoted, check_invariants=True, seed=1)
        simulation = Simulation(topology, jobs, config)
        result = simulation.run()
        assert result.metrics["jobs"]["completed"] == len(jobs)
        peaks[bool(quoted)] = dict(simulation.tenants.peak)
    assert all(peaks[True][t] <= caps[t] for t in peaks[True])  # check_invariants also checked every event
    assert any(peaks[False][t] > caps[t] for t in peaks[False])  # without quotas some tenant went above


# ---- the command -----------------------------------------------------------------------------------------
def alibaba(traces: Path, out: Path, *extra: str) -> list[str]:
    return [
        "simulate", "--trace", str(traces / "alibaba2023_openb_pods.csv"), "--nodes", "4", "--max-jobs", "300",
        "--queue", "core-fair", "--quotas", "trace", "--seed", "2", "--no-plots", "--out", str(out), *extra,
    ]  # fmt: skip


def test_same_seed_same_bytes_and_a_report_with_and_without_quotas(traces: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(alibaba(traces, first, "--compare-quotas")) == 0
    assert main(alibaba(traces, second, "--compare-quotas")) == 0
    for name in ("metrics.json", "report.md", "jobs-ours.csv", "timeseries.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    metrics = json.loads((first / "metrics.json").read_text())
    tenants = metrics["policies"]["ours"]["tenants"]
    assert set(tenants) == {"BE", "LS", "Burstable", "Guaranteed"}
    assert all(row["peak_gpus"] <= row["quota"]["max_gpus"] for row in tenants.values())
    assert "quota" not in metrics["without_quotas"]["ours"]["tenants"]["LS"]
    report = (first / "report.md").read_text()
    assert "## Tenants" in report and "without quotas: GPU-h share (%)" in report
    assert "| metric | ours with quotas | ours without |" in report
    assert "| LS | " in report


def test_a_generic_trace_without_tenants_runs_with_trace_quotas(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("submit_s,duration_s,num_gpus\n0,100,8\n10,50,16\n20,10,1\n")
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(trace), "--nodes", "2", "--queue", "core-fair", "--quotas", "trace"]
    assert main([*args, "--out", str(out), "--no-plots", "--check-invariants"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    default = metrics["policies"]["ours"]["tenants"]["default"]
    assert default["jobs"] == 3 and default["quota"]["guaranteed_gpus"] == 16  # one tenant: the whole cluster
    assert metrics["policies"]["ours"]["jobs"]["completed"] == 3


def test_the_fifo_queue_caps_each_tenant_at_its_quota(tmp_path: Path) -> None:
    # The operator's FIFO caps a queue at its maxGPUs; the simulator's FIFO does too, one line per tenant
    # (--check-invariants fails the run if a tenant ever holds more than its maximum).
    trace = tmp_path / "trace.csv"
    quotas = tmp_path / "quotas.csv"
    trace.write_text("submit_s,duration_s,num_gpus,tenant\n0,100,8,a\n1,100,8,a\n2,100,8,b\n")
    quotas.write_text("tenant,weight,guaranteed,max\na,1,0,8\n")
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(trace), "--nodes", "2", "--queue", "fifo", "--quotas", str(quotas)]
    assert main([*args, "--out", str(out), "--no-plots", "--check-invariants"]) == 0
    tenants = json.loads((out / "metrics.json").read_text())["policies"]["ours"]["tenants"]
    assert tenants["a"]["peak_gpus"] == 8 and tenants["b"]["peak_gpus"] == 8
    assert tenants["a"]["queueing_delay_s"]["max"] >= 99.0  # a's second job waited for its first


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--queue", "core-fair", "--compare-quotas"], "--compare-quotas compares with"),
        (["--queue", "core-fair", "--quotas", "trace", "--quota-borrow", "0.5"], "--quota-borrow must be >= 1"),
    ],
)
def test_quota_option_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("submit_s,duration_s,num_gpus,tenant\n0,100,8,a\n")
    code = main(["simulate", "--trace", str(trace), "--nodes", "1", "--out", str(tmp_path / "o"), *extra])
    assert code == 2
    assert message in capsys.readouterr().err

"""The event engine: ordering, conservation of GPUs, and tiny traces whose JCTs are checked by hand."""

from __future__ import annotations

import random

import pytest

from paralleljob.core.admit.fifo import RequeueOrder
from paralleljob.core.lifecycle import Phase
from paralleljob.core.timing.collectives import HGX_H100, allreduce_ms
from paralleljob.core.topology import Topology
from paralleljob.sim.cluster.failures import Failure, Scope
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import Simulation
from paralleljob.sim.run.events import EventQueue, Kind, SimClock
from paralleljob.sim.workload.trace import TraceJob


def job(job_id: str, submit: float, duration: float, shape: tuple[int, int, int], tenant: str = "t") -> TraceJob:
    return TraceJob(job_id, submit, duration, shape[0] * shape[1] * shape[2], tenant, shape)


def run(topology: Topology, trace: list[TraceJob], **config: object) -> Simulation:
    simulation = Simulation(topology, trace, SimConfig(check_invariants=True, **config))  # type: ignore[arg-type]
    simulation.run()
    return simulation


def jct(simulation: Simulation, job_id: str) -> float:
    j = simulation.jobs[job_id]
    assert j.finished is not None, f"{job_id} did not finish"
    return j.finished - j.trace.submit_s


# ---- events and clock ----------------------------------------------------------------------------------
def test_same_time_events_run_in_kind_order_then_push_order() -> None:
    queue = EventQueue()
    queue.push(5.0, Kind.SCHEDULE)
    queue.push(5.0, Kind.ARRIVAL, "b")
    queue.push(5.0, Kind.FINISH, "x")
    queue.push(1.0, Kind.SAMPLE)
    queue.push(5.0, Kind.ARRIVAL, "a")
    order = [(e.time, e.kind, e.job_id) for e in (queue.pop() for _ in range(len(queue)))]
    assert order == [
        (1.0, Kind.SAMPLE, ""),
        (5.0, Kind.FINISH, "x"),
        (5.0, Kind.ARRIVAL, "b"),
        (5.0, Kind.ARRIVAL, "a"),
        (5.0, Kind.SCHEDULE, ""),
    ]


def test_clock_never_runs_backwards() -> None:
    clock = SimClock()
    clock.advance(3.0)
    assert clock.now() == 3.0
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(2.0)


# ---- hand-checked traces -------------------------------------------------------------------------------
def test_strict_fifo_gang_jcts_by_hand() -> None:
    # A holds node 0 for 100 s; B needs both nodes, so it waits for A; C is small but stays behind B (no backfill).
    trace = [job("A", 0, 100, (8, 1, 1)), job("B", 10, 50, (8, 1, 2)), job("C", 20, 30, (1, 1, 1))]
    simulation = run(Topology.uniform(2), trace)
    assert [jct(simulation, j) for j in "ABC"] == [100.0, 140.0, 160.0]
    assert simulation.jobs["B"].first_start == 100.0
    assert all(j.phase is Phase.SUCCEEDED for j in simulation.jobs.values())


def test_first_fit_split_stretches_the_job_by_the_calibrated_collectives() -> None:
    # J1 takes GPUs 0-6; first-fit gives J2 GPU 7 (node 0) and GPU 8 (node 1): its DP all-reduce is a ring over
    # one NIC (47.5 GB/s effective) instead of NVLink in one node (370), as core.timing.collectives times them: 7.79x
    # the (only) communication term. With 10% communication at the ideal placement the step takes
    # 0.9 + 0.1 * 7.79 = 1.68x as long (the slowest-link price, 50 against 600, would say 2.1x).
    trace = [job("J1", 0, 1000, (1, 1, 7)), job("J2", 1, 100, (1, 1, 2))]
    size = 2e9 * 2  # the seed model's DP all-reduce: the whole 2B-parameter model in BF16
    ratio = allreduce_ms(HGX_H100, size, 2, per_domain=1)[0] / allreduce_ms(HGX_H100, size, 2)[0]
    assert ratio == pytest.approx(7.79, rel=1e-3)
    first_fit = run(Topology.uniform(2), trace, policy="first-fit", step_model="fraction", comm_fraction=0.1)
    assert first_fit.jobs["J2"].first_slowdown == pytest.approx(0.9 + 0.1 * ratio, rel=1e-9)
    assert jct(first_fit, "J2") == pytest.approx(100 * (0.9 + 0.1 * ratio), rel=1e-9)
    ours = run(Topology.uniform(2), trace, policy="ours", step_model="fraction", comm_fraction=0.1)
    assert jct(ours, "J2") == 100.0  # both GPUs on node 1: the ideal placement, no stretch


def test_failure_loses_work_since_the_last_checkpoint_by_hand() -> None:
    # Checkpoint every 30 s of compute, 5 s to write. The GPU fails at t=50: 35 s period -> one checkpoint
    # (30 s saved) plus 15 s of compute lost. Restart takes 10 s, then 70 s of work need 2 more checkpoints:
    # 70 + 2 * 5 = 80 s. Finish at 50 + 10 + 80 = 140.
    failure = Failure(50.0, node=0, cause="Faulty GPU", scope=Scope.GPU, gpu_index=0, repair_s=1000.0)
    for policy in ("ours", "first-fit", "best-fit"):
        simulation = run(
            Topology.uniform(1),
            [job("J", 0, 100, (1, 1, 1))],
            policy=policy,
            checkpoint_interval_s=30.0,
            checkpoint_cost_s=5.0,
            restart_overhead_s=10.0,
            scripted_failures=(failure,),
        )
        j = simulation.jobs["J"]
        assert jct(simulation, "J") == pytest.approx(140.0), policy
        assert j.lost_work_s == pytest.approx(15.0) and j.lost_gpu_s == pytest.approx(15.0)
        assert j.restart_gpu_s == 10.0 and j.restarts == 1
        assert simulation.tally.recovered_in_place == 1


def test_no_room_after_a_failure_requeues_until_repair() -> None:
    # The only node fails at t=50 (30 s saved at that point); it is back at t=150; the job restarts from its
    # checkpoint with 70 s of work: 70 + 2 checkpoints of 5 s = 80 s, done at 230.
    failure = Failure(50.0, node=0, cause="NIC", scope=Scope.NODE, gpu_index=0, repair_s=100.0)
    simulation = run(
        Topology.uniform(1, gpus_per_node=2),
        [job("J", 0, 100, (1, 1, 2))],
        checkpoint_interval_s=30.0,
        checkpoint_cost_s=5.0,
        scripted_failures=(failure,),
    )
    j = simulation.jobs["J"]
    assert (j.requeues, simulation.tally.requeued) == (1, 1)
    assert jct(simulation, "J") == pytest.approx(230.0)
    assert j.first_start == 0.0


def test_a_job_requeued_after_a_failure_waits_at_the_back_of_a_strict_fifo_line_when_its_queue_says_so() -> None:
    # A holds both nodes; B waits behind it. Node 0 fails at t=100 for an hour: A has no room and is requeued.
    # At its old place A would head the strict FIFO line without fitting, holding B back for the hour; at the
    # back (requeueOrder: Back, the operator writing queuedAt now) B starts on node 1 right away.
    failure = Failure(100.0, node=0, cause="NIC", scope=Scope.NODE, gpu_index=0, repair_s=3600.0)
    simulation = run(
        Topology.uniform(2),
        [job("A", 0, 1000, (8, 1, 2)), job("B", 10, 500, (8, 1, 1))],
        scripted_failures=(failure,),
        queue="fifo",
        requeue_order=RequeueOrder.BACK,
    )
    assert simulation.tally.requeued == 1
    assert simulation.jobs["B"].first_start == pytest.approx(100.0)
    assert simulation.jobs["A"].finished is not None and simulation.jobs["A"].finished > 3700.0


def test_a_job_requeued_after_a_failure_keeps_its_place_by_default() -> None:
    # The same run with the operator's default requeueOrder, KeepPlace (issue 38: a job knocked out by
    # hardware did nothing wrong), which the simulator's default follows: A heads the strict FIFO line again,
    # and B waits until A has run.
    failure = Failure(100.0, node=0, cause="NIC", scope=Scope.NODE, gpu_index=0, repair_s=3600.0)
    simulation = run(
        Topology.uniform(2),
        [job("A", 0, 1000, (8, 1, 2)), job("B", 10, 500, (8, 1, 1))],
        scripted_failures=(failure,),
        queue="fifo",
    )
    assert simulation.tally.requeued == 1
    a, b = simulation.jobs["A"], simulation.jobs["B"]
    assert a.finished is not None and b.first_start is not None
    assert b.first_start >= a.finished > 3700.0, "B waited behind A, back at its place, until A had run"


def test_software_failure_restarts_in_place() -> None:
    failure = Failure(40.0, node=0, cause="Software Bug", scope=Scope.SOFTWARE, gpu_index=0, repair_s=0.0)
    simulation = run(
        Topology.uniform(1),
        [job("J", 0, 100, (2, 1, 1))],
        checkpoint_interval_s=25.0,
        checkpoint_cost_s=0.0,
        restart_overhead_s=5.0,
        scripted_failures=(failure,),
    )
    # 25 s saved, 15 s lost; restart at 45, 75 s left: finish at 120. No GPU went down.
    assert jct(simulation, "J") == pytest.approx(120.0)
    assert simulation.gpus_down == 0 and simulation.jobs["J"].placements == 1


# ---- conservation --------------------------------------------------------------------------------------
def random_trace(seed: int, jobs: int, max_gpus: int = 24) -> list[TraceJob]:
    rng = random.Random(seed)
    sizes = [g for g in (1, 2, 3, 4, 6, 8, 16, 24) if g <= max_gpus]
    now = 0.0
    out = []
    for i in range(jobs):
        now += rng.expovariate(1 / 300.0)
        out.append(TraceJob(f"r{i:04d}", now, rng.uniform(10, 5000), rng.choice(sizes)))
    return out


@pytest.mark.parametrize("policy", ["ours", "first-fit", "best-fit", "volcano"])
def test_gpus_are_conserved_at_every_event_under_heavy_failures(policy: str) -> None:
    from paralleljob.sim.cluster.failures import Cause

    causes = (Cause("gpu", 3, Scope.GPU), Cause("node", 2, Scope.NODE), Cause("sw", 1, Scope.SOFTWARE))
    topology = Topology.uniform(6, levels=[("rack", 2, 100.0)])
    simulation = run(
        topology,
        random_trace(3, 150),
        policy=policy,
        failure_rate=20_000.0,  # 20 failures per node per day: many overlapping failures and repairs
        causes=causes,
        gpu_repair_hours=1.0,
        node_repair_hours=0.5,
        seed=11,
    )  # check_invariants=True raises InvariantViolated at the first event that loses or creates a GPU
    assert simulation.tally.injected > 50
    assert simulation.tally.jobs_interrupted > 0
    assert simulation.tally.requeued > 0 and simulation.tally.on_broken_hardware > 0
    assert all(j.phase in (Phase.SUCCEEDED, Phase.FAILED) for j in simulation.jobs.values())
    # Every job either finished or was given up by the operator's failure policy (maxRestarts 3): none is lost.
    finished = sum(1 for j in simulation.jobs.values() if j.finished is not None)
    given_up = [j for j in simulation.jobs.values() if j.gave_up]
    assert finished + len(given_up) == 150 and len(given_up) == simulation.tally.gave_up
    assert all(j.phase is Phase.FAILED and j.restarts >= 3 for j in given_up)


# ---- the core's queue policies ----------------------------------------------------------------------------
def test_core_fifo_pass_matches_the_builtin_fifo() -> None:
    trace = random_trace(8, 80)
    results = {}
    for queue in ("fifo", "core-fifo"):
        simulation = run(Topology.uniform(3), trace, queue=queue)
        results[queue] = {j.job_id: (j.first_start, j.finished) for j in simulation.jobs.values()}
    assert results["fifo"] == results["core-fifo"]


def test_core_fair_pass_backfills_past_a_blocked_head() -> None:
    # A holds 8 of 16 GPUs; B (16 GPUs) blocks; C (1 GPU, 50 s) ends long before A, so the core backfills it.
    trace = [job("A", 0, 1000, (8, 1, 1)), job("B", 10, 100, (8, 1, 2)), job("C", 20, 50, (1, 1, 1))]
    strict = run(Topology.uniform(2), trace, queue="core-fifo")
    fair = run(Topology.uniform(2), trace, queue="core-fair")
    assert jct(strict, "C") == 1100.0 - 20.0 + 50.0  # waits behind B, which waits for A
    assert jct(fair, "C") == 50.0
    assert jct(fair, "B") == jct(strict, "B") == 1090.0
    assert "fairness_jain_mean" in fair._result().metrics


def test_a_repaired_job_migrates_back_at_a_checkpoint_once_the_hardware_returns() -> None:
    # J (TP8 x DP2) sits on nodes 0 and 1 (rack 0). Node 1 fails at t=100 for 500 s: the minimal repair moves
    # that group to node 2, in the other rack, where its DP ring crawls at 10 GB/s. When node 1 is back at
    # t=600, core.reoptimize says move back; it does so at the end of the next checkpoint write (t=770:
    # restarted at 160, periods of 300 + 5 s), losing nothing, and finishes earlier than staying put.
    topology = Topology.uniform(3, levels=[("rack", 2, 100.0)], inter_node_bw_gbps=10.0)
    failure = Failure(100.0, node=1, cause="NIC", scope=Scope.NODE, gpu_index=0, repair_s=500.0)
    trace = [job("J", 0, 20_000, (8, 1, 2))]
    common = dict(checkpoint_interval_s=300.0, checkpoint_cost_s=5.0, scripted_failures=(failure,))
    stay = run(topology, trace, policy="ours", **common)
    back = run(topology, trace, policy="ours-reopt", **common)
    j = back.jobs["J"]
    assert back.migrations == 1 and stay.migrations == 0
    assert j.placements == 3 and j.restarts == 1 and j.lost_work_s == stay.jobs["J"].lost_work_s
    # The failure's restart is goodput lost to it; the move back's restart is not (no failure caused it).
    assert j.restart_gpu_s == 60.0 * 16 and j.move_gpu_s == 60.0 * 16
    assert j.cost_ms == back.ideal.total_ms(j.spec) < stay.jobs["J"].cost_ms
    assert jct(back, "J") < jct(stay, "J")
    metrics = back._result().metrics
    assert metrics["migrations_back"] == 1
    assert metrics["migrations_back_gpu_hours"] == pytest.approx(60.0 * 16 / 3600)
    assert metrics["goodput_lost"]["restart_gpu_hours"] == pytest.approx(60.0 * 16 / 3600)

"""The simulator carries out core.moves: small jobs left one per tray (48 GPUs free, no two whole trays
together) hold up a TP8 job for hours without moves; with them it starts at once, the small jobs move (no
dearer, off the trays it takes) and all finish; the preemption baseline stops them instead and loses their
work since their checkpoints."""

from __future__ import annotations

from paralleljob.core.job import ModelShape
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.sim.run.config import SimConfig
from paralleljob.sim.run.engine import SimResult, Simulation
from paralleljob.sim.workload.trace import TraceJob

HOUR = 3600.0


def scattered_trace() -> list[TraceJob]:
    """One rack of 16 usable trays filled by 64 one-GPU jobs; one per tray runs 10 h, the rest 10 min; a TP8
    job (two whole trays of one clique) arrives at 20 min."""
    trace = [
        TraceJob(f"s{i:02d}", float(i), 10 * HOUR if i % 4 == 0 else 600.0, 1, "small", (1, 1, 1)) for i in range(64)
    ]
    model = ModelShape(hidden_dim=8192, seq_len=4096, num_params_billions=16.0)
    trace.append(TraceJob("big", 1200.0, 2 * HOUR, 8, "llm", (8, 1, 1), model))
    return trace


def run(policy: str) -> SimResult:
    config = SimConfig(policy=policy, check_invariants=True)
    return Simulation(nvl72_topology(1), scattered_trace(), config).run()


def wait_of_big(result: SimResult) -> float:
    big = next(j for j in result.jobs if j.job_id == "big")
    assert big.first_start is not None and big.finished is not None
    return big.first_start - big.trace.submit_s


def test_moves_free_two_trays_at_once_where_the_job_waited_for_hours() -> None:
    without = run("ours-nvl72-spares2")
    assert wait_of_big(without) > 9 * HOUR  # until a 10-hour job ends
    moved = run("ours-nvl72-moves")
    assert wait_of_big(moved) < 0.1 * HOUR
    room = moved.metrics["room_moves"]
    assert room["moves"] >= 2 and room["stopped"] == 0
    assert 0 < room["lost_work_gpu_hours"] <= room["moves"] * 1200 / HOUR + 1e-9  # 1 GPU x 20 min each at most
    assert moved.metrics["jobs"]["completed"] == 65
    assert all(j.preemptions == 0 for j in moved.jobs)
    assert moved.metrics["large_job_wait_s"]["n"] == 1


def test_the_preemption_baseline_stops_the_same_jobs_and_requeues_them() -> None:
    stopped = run("ours-nvl72-preempt")
    assert wait_of_big(stopped) < 0.1 * HOUR
    room = stopped.metrics["room_moves"]
    assert room["moves"] == 0 and room["stopped"] >= 2
    assert sum(j.preemptions for j in stopped.jobs) == room["stopped"]
    assert stopped.metrics["jobs"]["completed"] == 65

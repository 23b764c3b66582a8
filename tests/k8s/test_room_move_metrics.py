"""The waiting job's wait, as a metric (issue 40, "metrics for moves, lost GPU-seconds, and the waiting job's
wait"): a job admitted into room that moves freed is counted in ``paralleljob_room_move_wait_seconds``,
once since it was queued and once since its plan was made; a job admitted any other way is not."""

from __future__ import annotations

from paralleljob.k8s.edge.constants import LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.parse.queues import parse_time
from paralleljob.k8s.plan.metrics_model import room_waits
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.observe.reporting import PassReport
from tests.k8s import test_tray_room_moves as room
from tests.k8s.factories import paralleljob


def test_the_job_a_plan_serves_reports_its_wait_since_queued_and_since_planned() -> None:
    fc = room.scattered(interval=7200)
    room.add_big(fc, 5000)
    fc.step(room.at(5000))  # queued; the plan is asked at its first refusal, later to tell the two apart
    for t in range(5400, 5404):
        fc.step(room.at(t))
    status = fc.job(room.BIG)["status"]
    queued, made = parse_time(status["queuedAt"]), parse_time(status["movePlan"]["createdAt"])
    assert queued is not None and made is not None and made > queued, status
    for move in status["movePlan"]["moves"]:
        fc.job(move["job"])["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: room.at(7200)}
    seen = []
    for t in range(7210, 7218):
        plan = fc.step(room.at(t))
        now = parse_time(room.at(t))
        assert now is not None
        if waits := room_waits(plan.seen(), now):
            seen.append((now, waits, plan))
    assert fc.phase(room.BIG) == "Running"
    assert len(seen) == 1, "counted once, on the pass that admitted it"
    ((now, waits, admitting),) = seen
    assert waits == [("queued", now - queued), ("planned", now - made)]
    metrics = Metrics()
    report = PassReport(None, metrics, None, None, None)  # type: ignore[arg-type]  # only the metrics are used
    report.queue_waits(admitting)
    for since in ("queued", "planned"):
        count = metrics.registry.get_sample_value("paralleljob_room_move_wait_seconds_count", {"since": since})
        assert count == 1.0, since


def test_a_job_admitted_without_moves_is_not_counted() -> None:
    fc = room.scattered()
    fc.add_job(paralleljob("one", 4, 1, 1, memory=10.0, created=room.at(600)))  # fits a free tray at once
    for t in range(600, 604):
        plan = fc.step(room.at(t))
        assert room_waits(plan.seen(), float(t)) == []
    assert fc.phase("ns/one") == "Running"

"""Which lines the waiting memo leaves out when a queue's own running job ends (``waiting_lines.look``): the
GPUs a queue's jobs hold decide a verdict only under a cap, so an uncapped line stays out (its head looked at
again, the rest not decided), and a capped one is decided whole. The property tests hold both to the full
pass; these say that the uncapped line really is left out, which a flood of short jobs depends on."""

from __future__ import annotations

import copy

from paralleljob.k8s.edge.parse.queues import QueueInfo
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def finish(fc: FakeCluster, key: str) -> None:
    for pod in fc.job_pods(key):
        done = copy.deepcopy(pod)
        done["status"]["phase"] = "Succeeded"
        fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = done


def blocked_line(team: QueueInfo) -> FakeCluster:
    """Queue team: r1 runs on 2 GPUs, big (16 GPUs) waits behind r0's 4 GPUs of another queue, three small
    jobs wait behind big (strict FIFO)."""
    fc = FakeCluster([node("n0", 8), node("n1", 8)], queues={"other": QueueInfo("other"), "team": team}, memo=True)
    fc.add_job(paralleljob("r0", 4, 1, 1, queue="other", created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("r1", 2, 1, 1, queue="team", created="2024-01-01T00:00:01Z"))
    fc.settle(3)
    fc.add_job(paralleljob("big", 8, 1, 2, queue="team", created="2024-01-01T00:00:02Z"))
    for i in range(3):
        fc.add_job(paralleljob(f"s{i}", 1, 1, 1, queue="team", created=f"2024-01-01T00:00:0{3 + i}Z"))
    fc.settle(6)
    assert [fc.phase(f"ns/{name}") for name in ("r0", "r1", "big")] == ["Running", "Running", "Queued"]
    assert fc.memo is not None and "team" in fc.memo.lines, "the blocked line is remembered"
    return fc


def test_an_uncapped_line_stays_out_when_its_own_running_job_ends() -> None:
    fc = blocked_line(QueueInfo("team"))
    finish(fc, "ns/r1")
    plan = fc.step()
    assert fc.phase("ns/r1") == "Succeeded"
    assert plan.quiet_waiting.get("team") == 3, "big looked at again (12 GPUs free now), the rest left out"
    assert fc.phase("ns/big") == "Queued" and "(12 GPUs free)" in fc.job("ns/big")["status"]["message"]
    fc.settle(4)
    assert [fc.phase(f"ns/s{i}") for i in range(3)] == ["Queued"] * 3


def test_a_capped_line_is_decided_whole_when_the_gpus_its_jobs_hold_change() -> None:
    fc = blocked_line(QueueInfo("team", max_gpus=24))
    finish(fc, "ns/r1")
    plan = fc.step()
    assert "team" not in plan.quiet_waiting, "its cap's room moved: every job of the line is decided again"
    fc.settle(4)
    assert fc.phase("ns/big") == "Queued"


def test_a_head_rewriting_its_message_waits_outside_its_line_and_the_rest_stays_left_out() -> None:
    # Its figures moved (r1 ended): its message is rewritten. The memo used to forget the whole line for that
    # write, so every admission or freed GPU in a flood sent whole lines through the pass twice.
    fc = blocked_line(QueueInfo("team"))
    finish(fc, "ns/r1")
    fc.step()
    assert fc.memo is not None
    line = fc.memo.lines["team"]
    assert line.head_key == "ns/big" and "ns/big" not in line.members and len(line.members) == 3
    plan = fc.step()  # the write landed: big is decided first, the three behind it are not
    assert plan.quiet_waiting.get("team") == 3
    assert "ns/big" in {a.job.key for a in plan.seen()}
    fc.settle(3)
    assert "ns/big" in fc.memo.lines["team"].members, "with nothing left to write it joins its line again"
    assert fc.phase("ns/big") == "Queued" and "(12 GPUs free)" in fc.job("ns/big")["status"]["message"]


def test_a_line_whose_head_left_while_waiting_outside_is_decided_whole() -> None:
    fc = blocked_line(QueueInfo("team"))
    finish(fc, "ns/r1")
    fc.step()
    assert fc.memo is not None and "ns/big" not in fc.memo.lines["team"].members
    del fc.jobs["ns/big"]
    fc.settle(4)
    assert [fc.phase(f"ns/s{i}") for i in range(3)] == ["Running"] * 3, "the jobs behind it go in at once"

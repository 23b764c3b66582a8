"""The waiting memo with chains still running: in the reconciler a job's writes run as a task, so for a pass or
more the job is ``busy`` (its decisions in flight, its object unchanged), and a blocking head whose own status
write is in flight waits outside its line (``waiting_lines.outside_head``). The property tests beside this one
carry every write out at once; here the same random events run with random jobs' chains held for a random
number of passes, the same ones in both clusters, one decided with the memo and one without. Every pass the
same jobs are in flight with the same binds, and once every chain has landed both clusters stand alike.

One write may be in flight on one side only: a waiting job's new message with its phase and Placed reason
unchanged, which the full pass writes as soon as a figure in it moves and the memo only when it looks at
the line (as in the pass where a deleted job's pods are still there, orphans, and the next pass admits
the head on both sides). The property tests beside this one do not compare such messages either; here
that write lands at once, so that its job is not busy on one side only."""

from __future__ import annotations

import copy
import random
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.status import wait_message_changed
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import START, FakeCluster
from tests.property.test_waiting_memo_properties import apply, clusters, events, outcome, waits


def held_pass(kept: FakeCluster, full: FakeCluster, rng: random.Random) -> int:
    """One pass of both clusters: some chains in flight land first, then some jobs' new decisions are held.
    How many of the memo's jobs were left out of the pass."""
    for key in sorted(full.inflight):
        if rng.random() < 0.5:
            kept.land(key)
            full.land(key)
    hold = {key for key in sorted(full.jobs) if rng.random() < 0.3}
    kept.step(hold=hold)
    full.step(hold=hold)
    for key in set(kept.inflight) ^ set(full.inflight):
        one = kept if key in kept.inflight else full
        if message_refresh(one.inflight[key]):
            one.land(key)
    assert kept.last_plan is not None
    return sum(kept.last_plan.quiet_waiting.values())


def message_refresh(actions: JobActions) -> bool:
    """Whether ``actions`` only rewrite a waiting job's message: the same phase and Placed reason, nothing
    made, bound or deleted."""
    draft = actions.draft
    if draft.data.get("phase") != "Queued" or draft.original.get("phase") != "Queued":
        return False
    if draft.data.get("reason") != draft.original.get("reason") or not wait_message_changed(draft):
        return False
    return not (actions.creates or actions.binds or actions.deletes or actions.delete_job)


@settings(max_examples=40, deadline=None)
@given(events, st.randoms(use_true_random=False))
def test_chains_in_flight_change_nothing_the_memo_decides(steps: list[tuple[Any, ...]], rng: random.Random) -> None:
    kept, full = clusters()
    skipped = held_heads = 0
    for serial, step in enumerate(steps):
        for fc in (kept, full):
            apply(fc, step, serial)
        for _ in range(4):
            skipped += held_pass(kept, full, rng)
            where = f"after {step} (pass at {kept.seconds}s from {START})"
            assert set(kept.inflight) == set(full.inflight), where
            assert kept.binds == full.binds, where
            assert outcome(kept) == outcome(full), where
            assert kept.memo is not None
            outside = [line for line in kept.memo.lines.values() if line.head_key and line.head_key not in line.members]
            held_heads += len(outside)
    for fc in (kept, full):  # every chain lands, and the clusters settle
        fc.land()
    for _ in range(4):
        kept.step()
        full.step()
        assert kept.binds == full.binds
        assert outcome(kept) == outcome(full)
        assert waits(kept) == waits(full)
    event(f"jobs left out: {'some' if skipped else 'none'}")
    event(f"heads waiting outside their line: {'some' if held_heads else 'none'}")


def test_a_job_admitted_where_a_finished_job_still_writes_its_end_keeps_running() -> None:
    # Found by the property above (the harness then held a finished job's GPUs while its write was in flight,
    # as the reconciler's view does not: its ``releasing`` set): the job admitted onto those GPUs was later
    # taken for a double booking ("GPU 0 is recorded for this job and for ns/done") and requeued.
    for memo in (True, False):
        fc = FakeCluster([node("n0", 8)], memo=memo)
        fc.add_job(paralleljob("done", 8, 1, 1, created="2024-01-01T00:00:00Z"))
        fc.settle(3)
        fc.add_job(paralleljob("next", 8, 1, 1, created="2024-01-01T00:00:01Z"))
        fc.settle(2)
        assert fc.phase("ns/next") == "Queued"
        for pod in fc.job_pods("ns/done"):
            ended = copy.deepcopy(pod)
            ended["status"]["phase"] = "Succeeded"
            fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = ended
        fc.step(hold={"ns/done"})
        assert fc.releasing == {"ns/done"} and fc.phase("ns/done") == "Running", "its end not written yet"
        for _ in range(4):
            fc.step(hold={"ns/done"})
        assert fc.phase("ns/next") == "Running", memo
        assert not [e for e in fc.events if e[0] == "ns/next" and e[1] != "Placed" and e[1] != "Accepted"], fc.events
        fc.land()
        fc.settle(2)
        assert (fc.phase("ns/done"), fc.phase("ns/next")) == ("Succeeded", "Running")

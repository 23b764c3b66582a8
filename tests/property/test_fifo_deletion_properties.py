"""Strict FIFO under deletions (the issue's item 4): ParallelJobs and pod groups are submitted, finish and are
deleted in any order, a pod group's pods and its adopting ParallelJob vanish in different passes, and any job's
writes may still be in flight (the reconciler runs each job's chain as a task; such a job is ``busy`` in the
next passes). After every pass: a job placed by it had no waiting job of its queue ahead of it that was left
behind, unless that job's own placement is being written, or its decision is in flight and it still fits on
what the pass left (the room it would take was kept free of the jobs behind it)."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from paralleljob.core.admit.fifo import line_key
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.k8s.edge.constants import (
    COMPLETION_INDEX_KEY,
    GPU_RESOURCE,
    PARALLELISM_ANNOTATION,
    POD_GROUP_LABEL,
    PRIORITY_ANNOTATION,
    SCHEDULER_NAME,
)
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.queues import parse_time
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest, parse_job
from paralleljob.k8s.plan.admission.fifo_admission import tiebreak
from paralleljob.k8s.plan.decide import claims_of
from paralleljob.k8s.plan.groups.podgroups import by_group, group_state
from paralleljob.k8s.view.clusterview import build_view
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import START, FakeCluster


def queue_order(jobs: Sequence[tuple[JobObject, JobRequest]]) -> list[tuple[JobObject, JobRequest]]:
    """The core FIFO pass's order (``core.admit.fifo.line_key``) of ParallelJobs."""
    return sorted(
        jobs,
        key=lambda item: line_key(
            item[1].queue, item[1].priority, parse_time(item[0].queued_at) or 0.0, tiebreak(item[0]), item[0].key
        ),
    )


SHAPES = [(4, 1, 1), (8, 1, 1), (8, 2, 1), (4, 1, 3)]  # 4 .. 16 GPUs on 2 nodes of 8: heads block often
WAITING = (Phase.PENDING, Phase.QUEUED)
_ids = itertools.count()


def stamp(fc: FakeCluster) -> str:
    return (START + dt.timedelta(seconds=fc.seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def group_pods(name: str, shape: tuple[int, int, int], priority: int) -> list[dict[str, Any]]:
    tp, pp, dp = shape
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"uid-job-{name}", "controller": True}
    pods = []
    for index in range(pp * dp):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{index}",
                    "namespace": "ns",
                    "uid": f"uid-{name}-{index}-{next(_ids)}",
                    "resourceVersion": str(next(_ids)),
                    "labels": {POD_GROUP_LABEL: name},
                    "annotations": {
                        PARALLELISM_ANNOTATION: f"{tp}x{pp}x{dp}",
                        PRIORITY_ANNOTATION: str(priority),
                        COMPLETION_INDEX_KEY: str(index),
                    },
                    "ownerReferences": [owner],
                },
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "containers": [{"name": "t", "image": "x", "resources": {"limits": {GPU_RESOURCE: str(tp)}}}],
                },
                "status": {"phase": "Pending"},
            }
        )
    return pods


# a pass; the writes it decides for these jobs (indices into the jobs by name; 8: all of them) stay in flight
passes = st.tuples(st.just("pass"), st.sets(st.integers(0, 8), max_size=3))
ops = st.lists(
    st.one_of(
        passes,
        passes,
        st.tuples(st.just("submit"), st.booleans(), st.sampled_from(SHAPES), st.integers(0, 1)),
        st.tuples(st.just("land"), st.integers(0, 7)),
        st.tuples(st.just("finish"), st.integers(0, 7)),
        st.tuples(st.just("delete_job"), st.integers(0, 7)),  # `kubectl delete pj`
        st.tuples(st.just("delete_pods"), st.integers(0, 7)),  # a group's pods get their deletionTimestamp
        st.tuples(st.just("purge"), st.just(0)),  # kubelets confirm: terminating pods vanish
    ),
    min_size=20,
    max_size=60,
)


def pick(fc: FakeCluster, names: list[str], i: int) -> str | None:
    live = [n for n in names if f"ns/{n}" in fc.jobs or any(k[1].startswith(f"{n}-") for k in fc.pods)]
    return live[i % len(live)] if live else None


def eligible(job: JobObject, group_pods_now: dict[str, list[Any]]) -> bool:
    """In line for admission: waiting, not being deleted, and (a pod group) with every node rank's pod."""
    if job.phase not in WAITING or job.deleting or job.request is None:
        return False
    if job.request.pod_group:
        return group_state(job.request, group_pods_now.get(job.key, [])).ready
    return True


def fits_now(fc: FakeCluster, job: JobObject) -> bool:
    """Whether ``job`` fits on what the pass left: every decision of the pass counted as made, including
    those still in flight (a completion whose write has not landed frees its GPUs in the pass that decided
    it, so a job behind the busy head may use them as long as the head's room is kept)."""
    nodes = [parse_node(n, fc.config) for n in fc.nodes.values()]
    bodies = dict(fc.jobs)
    for key, actions in fc.inflight.items():
        if key in bodies and actions.writes_status:
            bodies[key] = {**bodies[key], "status": copy.deepcopy(actions.draft.data)}
    jobs = [parse_job(j) for j in bodies.values()]
    view = build_view(nodes, [parse_pod(p) for p in fc.pods.values()], claims_of(jobs), fc.config)
    assert job.request is not None
    try:
        Placer(view.state).place(job.request.spec, cost_model(job.request.cost_model))
    except PlacementInfeasible:
        return False
    return True


def check_pass(fc: FakeCluster, before: dict[str, JobObject], pods_before: list[Any], busy: dict[str, Any]) -> None:
    plan = fc.last_plan
    assert plan is not None
    groups = by_group(pods_before)
    admitted = {a.job.key for a in plan.jobs if a.draft.phase is Phase.PLACING and before[a.job.key].phase in WAITING}
    if any(before[k].phase in WAITING for k in busy if k in before):
        event("a waiting job was busy")
    if admitted:
        event("a pass placed a job")
    line = queue_order([(j, j.request) for j in before.values() if eligible(j, groups) and j.request is not None])
    for position, (job, request) in enumerate(line):
        if job.key not in admitted:
            continue
        for ahead, ahead_request in line[:position]:
            if ahead_request.queue != request.queue or ahead.key in admitted:
                continue
            event("a job was placed behind a waiting one")
            if busy.get(ahead.key) is not None:
                continue  # its placement is being written: it holds its GPUs already
            assert ahead.key in busy, f"{job.key} placed ahead of {ahead.key}, which waited and was not busy"
            assert fits_now(fc, ahead), (
                f"{job.key} placed ahead of {ahead.key} (decision in flight), which no longer fits: {plan.warnings}"
            )


@settings(max_examples=300, deadline=None)
@given(ops)
def test_strict_fifo_holds_whatever_is_deleted_and_whatever_is_in_flight(steps: list[tuple[Any, ...]]) -> None:
    fc = FakeCluster([node(f"n{i}") for i in range(2)])
    names: list[str] = []
    for op in steps:
        kind = op[0]
        if kind == "submit":
            _, is_group, shape, priority = op
            name = f"{'g' if is_group else 'j'}{len(names)}"
            names.append(name)
            if is_group:
                for pod in group_pods(name, shape, priority):
                    fc.pods[("ns", pod["metadata"]["name"])] = pod
            else:
                tp, pp, dp = shape
                fc.add_job(paralleljob(name, tp, pp, dp, priority=priority, created=stamp(fc)))
        elif kind == "pass":
            before = {k: parse_job(j) for k, j in fc.jobs.items()}
            pods_before = [parse_pod(p) for p in fc.pods.values()]
            busy = fc.busy()
            keys = sorted(fc.jobs)
            hold = set(keys) if 8 in op[1] else {keys[i % len(keys)] for i in op[1]} if keys else set()
            plan = fc.step(hold=hold)
            check_pass(fc, before, pods_before, busy)
            for manifest in plan.adopt:  # the API server creates the adopting ParallelJob
                key = f"ns/{manifest['metadata']['name']}"
                if key not in fc.jobs:
                    body = copy.deepcopy(manifest)
                    body["metadata"].update(
                        uid=f"uid-pj-{next(_ids)}", resourceVersion=str(next(_ids)), creationTimestamp=stamp(fc)
                    )
                    fc.add_job(body)
        elif kind == "land":
            keys = sorted(fc.inflight)
            if keys:
                fc.land(keys[op[1] % len(keys)])
        elif kind == "finish":
            name = pick(fc, names, op[1])
            for pod in fc.pods.values():
                meta = pod["metadata"]
                mine = meta.get("labels", {}).get("paralleljob.dev/job") == name or meta["name"].startswith(f"{name}-")
                if mine and pod["spec"].get("nodeName"):
                    pod["status"]["phase"] = "Succeeded"
        elif kind == "delete_job":
            name = pick(fc, names, op[1])
            if name is not None:
                fc.jobs.pop(f"ns/{name}", None)  # a group's ParallelJob may go before or after its pods
        elif kind == "delete_pods":
            name = pick(fc, names, op[1])
            for (_, pod_name), pod in fc.pods.items():
                grouped = POD_GROUP_LABEL in pod["metadata"]["labels"]
                if name is not None and grouped and pod_name.startswith(f"{name}-"):
                    pod["metadata"]["deletionTimestamp"] = stamp(fc)
        else:
            for key in [k for k, p in fc.pods.items() if p["metadata"].get("deletionTimestamp")]:
                del fc.pods[key]


def test_a_head_whose_status_write_is_in_flight_still_blocks_its_queue() -> None:
    """The issue's second report, reduced: a deletion frees room, the blocked head's new "does not fit" reason is
    being written when the next pass comes, and the job behind it must still wait."""
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 2}") for i in range(4)])
    fc.add_job(paralleljob("running", 8, 1, 1, created="2024-01-01T00:00:00Z"))
    fc.settle(2)
    fc.add_job(paralleljob("big", 8, 2, 2, created="2024-01-01T00:00:01Z"))
    fc.add_job(paralleljob("small", 4, 1, 1, created="2024-01-01T00:00:02Z"))
    fc.add_job(paralleljob("other", 8, 1, 1, created="2024-01-01T00:00:00Z"))  # takes a whole node: big waits
    fc.settle(3)
    assert (fc.phase("ns/big"), fc.phase("ns/small")) == ("Queued", "Queued")
    del fc.jobs["ns/running"]  # `kubectl delete pj running`: 24 GPUs free, big (32) still does not fit
    fc.step()  # its pods go (orphans)
    fc.step(hold={"ns/big"})  # big's new reason ("... only 2 such groups are free now") is still being written
    assert "ns/big" in fc.inflight
    fc.step()
    assert fc.phase("ns/small") == "Queued", "small was placed while big, ahead of it, was blocked"

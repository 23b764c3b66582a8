"""The reconciler's claims come from the jobs that may hold GPUs, kept from the job store's changes
(``runtime.holders.HolderClaims``): after any sequence of job events, re-lists and busy chains they are exactly what
``claims_of`` finds reading every job, as each pass used to."""

from __future__ import annotations

import copy
import itertools
from typing import Any, cast

from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.plan.decide import claims_of
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.reconciler import Reconciler
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

_rv = itertools.count(10**8)


def settled() -> FakeCluster:
    fc = FakeCluster([node(f"gpu-node-{i:03d}", leaf="leaf-0") for i in range(2)])
    for i in range(6):
        fc.add_job(paralleljob(f"j{i}", 4, 1, 1, created=f"2024-01-01T00:00:0{i}Z"))
    fc.settle(4)
    return fc


def newer(body: dict[str, Any], **status: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["status"] = {**(out.get("status") or {}), **status}
    out["metadata"]["resourceVersion"] = str(next(_rv))
    return out


def test_claims_from_the_kept_holders_match_a_scan_of_every_job() -> None:
    fc = settled()
    bodies = dict(fc.jobs)
    running = sorted(k for k, b in bodies.items() if b["status"]["phase"] == "Running")
    queued = sorted(k for k, b in bodies.items() if b["status"]["phase"] == "Queued")
    assert len(running) == 4 and queued, "the cluster is full: some jobs hold GPUs, some wait"
    rec = Reconciler(cast(Any, object()), OperatorConfig(), Metrics())
    claims_made = []

    def check(busy: dict[str, Any] | None = None) -> None:
        busy = busy or {}
        jobs = rec.jobs.values()
        claims = rec.holders.claims(busy, rec.releasing)
        assert claims == claims_of(jobs, busy, rec.releasing)
        claims_made.append(len(claims))

    rec.on_list("job", [copy.deepcopy(b) for b in bodies.values()], "1")
    check()
    rec.on_event("job", "MODIFIED", newer(bodies[running[0]], phase="Succeeded"))  # finished: gives its GPUs up
    check()
    rec.on_event("job", "ADDED", paralleljob("late", 4, 1, 1, created="2024-01-01T00:01:00Z"))
    check()
    rec.on_event("job", "DELETED", newer(bodies[running[1]]))
    check()
    deleting = newer(bodies[running[2]])
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:02:00Z"
    rec.on_event("job", "MODIFIED", deleting)
    check()
    # a waiting job whose placement is being written holds GPUs already; a finished one being written does not
    record = rec.jobs.get(*running[3].split("/"))
    assert record is not None and record.record is not None
    check({queued[0]: record.record})
    rec.releasing.add(running[3])
    check()
    rec.releasing.clear()
    rec.on_list("job", [copy.deepcopy(bodies[k]) for k in (running[3], queued[0])], "2")  # a re-list
    check()
    assert claims_made == [4, 3, 3, 2, 1, 2, 0, 1]

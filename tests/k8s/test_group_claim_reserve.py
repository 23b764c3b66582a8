"""The executor's reservation of a PodGroup's shared ResourceClaim, against the in-memory API with its
resourceVersion preconditions: the PodGroup is added to ``status.reservedFor`` beside the consumers already
there, before any pod is bound; a claim changed meanwhile (409) binds nothing and asks for another pass."""

from __future__ import annotations

import asyncio
from typing import Any

from paralleljob.k8s.edge.parse.dra import parse_claim
from paralleljob.k8s.edge.parse.nativegroups import parse_pod_group
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.actions import JobActions, PodBind
from paralleljob.k8s.plan.groups.groupclaims import reservations
from paralleljob.k8s.plan.status import StatusDraft
from paralleljob.k8s.runtime.executor import Executor, Outcome
from paralleljob.k8s.view.store import ObjectStore
from tests.k8s import factories
from tests.k8s.fakekube import FakeApi
from tests.k8s.test_native_pod_groups import pod_group

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
OTHER = {"apiGroup": "", "resource": "pods", "name": "monitor", "uid": "uid-monitor"}


def _setup() -> tuple[FakeApi, Executor, JobActions]:
    api = FakeApi()
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "imex-channel", "namespace": "ns", "uid": "uid-claim"},
        "status": {"allocation": {"devices": {"results": []}}, "reservedFor": [OTHER]},
    }  # fmt: skip
    stored = api.seed(CLAIMS, claim)
    group = pod_group()
    group["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": "imex-channel"}]
    native = parse_pod_group(group)
    job = parse_job(factories.paralleljob("llm-workers", 4, 2, 2))
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    actions.reserves = reservations(native, {"ns/imex-channel": parse_claim(stored)})
    actions.binds = [PodBind("ns", "w-0", "uid-w0", "n0")]
    store: ObjectStore[Any] = ObjectStore(lambda b: b)
    executor = Executor(api.client(), ObjectStore(parse_job), ObjectStore(lambda b: b), lambda *a: None)
    executor.claim_store = store
    return api, executor, actions


def test_the_claim_is_reserved_for_the_podgroup_before_the_pods_are_bound() -> None:
    api, executor, actions = _setup()
    outcome = Outcome()
    asyncio.run(executor.run_job(actions, outcome))
    claim = api.get(f"{CLAIMS}/imex-channel")
    assert claim is not None
    assert claim["status"]["reservedFor"] == [
        OTHER,
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "llm-workers", "uid": "uid-pg-llm-workers"},
    ]
    patch_at = next(i for i, (_, m, p) in enumerate(api.calls) if m == "PATCH" and "resourceclaims" in p)
    bind_at = next(i for i, (_, m, p) in enumerate(api.calls) if p.endswith("/binding"))
    assert patch_at < bind_at


def test_a_claim_changed_meanwhile_binds_nothing_and_asks_for_another_pass() -> None:
    api, executor, actions = _setup()
    api.serve("PATCH", f"{CLAIMS}/imex-channel/status", {"status": {"reservedFor": []}}, {})  # someone else wrote
    outcome = Outcome()
    asyncio.run(executor.run_job(actions, outcome))
    assert api.count("POST", "/binding") == 0 and outcome.changed and not outcome.failures

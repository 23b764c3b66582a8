"""The runtime (executor, leader election, the reconcile loop) against the in-memory API of ``fakekube``:
the real request-building code, the API's conflict/precondition answers, injected faults, no cluster."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from paralleljob.k8s.edge.config import OperatorConfig, TopologyConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.edge.parse.specs import JobObject, parse_job
from paralleljob.k8s.plan.actions import Plan
from paralleljob.k8s.plan.decide import Observed, decide
from paralleljob.k8s.runtime import reconciler as reconciler_module
from paralleljob.k8s.runtime.api import NotLeading, job_path
from paralleljob.k8s.runtime.election import LeaderElection
from paralleljob.k8s.runtime.executor import Executor, Outcome
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.reconciler import Reconciler
from paralleljob.k8s.view.store import ObjectStore
from tests.k8s import factories
from tests.k8s.fakekube import FakeApi, FakeKube
from tests.timings import record_time


async def execute(executor: Executor, plan: Plan) -> Outcome:
    """A whole plan at once, through the chains the runner's lanes run: each job's actions as one chain
    (status, then its pods), chains of different jobs overlapping."""
    outcome = Outcome()
    chains = [executor.run_job(actions, outcome) for actions in plan.jobs]
    chains += [executor.delete_orphan(d, outcome) for d in plan.orphans]
    chains += [executor.delete_domain(d, outcome) for d in plan.domain_deletes]
    await asyncio.gather(*chains)
    return outcome


NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/ns/pods"
JOBS = job_path("ns")
JOB = job_path("ns", "train")
GANG = 4  # a 4x2x2 job on 8-GPU nodes: four pods of one TP group each


def cluster(nodes: int = 2) -> FakeApi:
    api = FakeApi()
    for i in range(nodes):
        api.seed(NODES, factories.node(f"n{i}", 8))
    api.seed(JOBS, factories.paralleljob("train", 4, 2, 2))
    return api


class Operator:
    """The executor and the stores it writes back into, with the pure pass in between (as the reconciler
    wires them, minus the loop)."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.kube = api.client()
        self.jobs: ObjectStore[JobObject] = ObjectStore(parse_job)
        self.pods: ObjectStore[PodInfo] = ObjectStore(parse_pod)
        self.events: list[tuple[str, str]] = []
        self.executor = Executor(
            self.kube, self.jobs, self.pods, lambda job, kind, reason, msg: self.events.append((kind, reason))
        )
        self.seconds = 10

    async def relist(self) -> None:
        for store, path in ((self.jobs, JOBS), (self.pods, PODS)):
            items, rv = await self.kube.list(path)
            store.replace_all(items, rv)

    async def decide(self, bind_failures: dict[str, str] | None = None) -> Plan:
        await self.relist()
        nodes, _ = await self.kube.list(NODES)
        self.seconds += 1
        observed = Observed(
            jobs=self.jobs.values(),
            pods=self.pods.values(),
            nodes=[parse_node(n, TopologyConfig()) for n in nodes],
            now=f"2024-01-01T00:00:{self.seconds:02d}Z",
            bind_failures=bind_failures or {},
        )
        plan, _ = decide(observed, TopologyConfig())
        return plan


def pod_names(plan: Plan) -> list[str]:
    return [c.manifest["metadata"]["name"] for a in plan.jobs for c in a.creates]


def bound(api: FakeApi) -> list[str]:
    return [p["metadata"]["name"] for p in api.pods_of("ns", "train") if p["spec"].get("nodeName")]


# ---- the executor ---------------------------------------------------------------------------------------


def test_the_placement_is_recorded_before_any_pod_exists_then_the_gang_is_created_and_bound() -> None:
    async def scenario() -> None:
        api = cluster()
        op = Operator(api)
        plan = await op.decide()
        outcome = await execute(op.executor, plan)
        methods = [(m, p) for _, m, p in api.calls if m != "GET"]
        assert methods[0] == ("PATCH", f"{JOB}/status"), "the status (the placement) is written first"
        assert outcome.bound == GANG and not outcome.failures and not outcome.hold
        assert sorted(bound(api)) == sorted(pod_names(plan))
        status = api.get(JOB)["status"]  # type: ignore[index]
        assert status["phase"] == "Placing" and len(status["placement"]["pods"]) == GANG
        # what the executor wrote came back into the stores at once, before any watch or re-list
        assert all(op.pods.get("ns", name).node for name in pod_names(plan))  # type: ignore[union-attr]
        assert op.jobs.get("ns", "train").phase.value == "Placing"  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_a_status_write_on_a_stale_copy_is_refused_and_no_pod_is_made() -> None:
    async def scenario() -> None:
        api = cluster()
        op = Operator(api)
        plan = await op.decide()
        api.objects[JOB]["metadata"]["labels"] = {"touched": "yes"}  # someone wrote the job meanwhile
        api.objects[JOB]["metadata"]["resourceVersion"] = "999"
        outcome = await execute(op.executor, plan)
        assert outcome.wrote == 0 and api.count("POST", PODS) == 0, "no pods without a recorded placement"
        assert op.jobs.body("ns", "train")["metadata"]["resourceVersion"] == "999", "re-read to decide again"  # type: ignore[index]

    asyncio.run(scenario())


def finished_with_ttl(api: FakeApi) -> str:
    """A job that Succeeded ten seconds before the Operator's clock starts, with ttlSecondsAfterFinished 0."""
    status = {"phase": "Succeeded", "completionTime": "2024-01-01T00:00:00Z"}
    api.seed(JOBS, factories.paralleljob("done", 8, 1, 1, status=status, extra_spec={"ttlSecondsAfterFinished": 0}))
    return job_path("ns", "done")


def test_a_finished_job_past_its_ttl_is_deleted_on_its_uid_after_a_normal_event() -> None:
    async def scenario() -> None:
        api = cluster()
        path = finished_with_ttl(api)
        op = Operator(api)
        op.executor.services.add(("ns", "done", "uid-ns-done"))  # as if it had made the job's Service
        plan = await op.decide()
        outcome = await execute(op.executor, plan)
        assert ("ns", "done", "uid-ns-done") not in op.executor.services, "not remembered for good"
        assert api.get(path) is None and ("DELETE", path) in [(m, p) for _, m, p in api.calls]
        assert ("Normal", "TTLExpired") in op.events and outcome.changed and not outcome.hold
        assert op.jobs.get("ns", "done") is None, "forgotten at once, before the watch says so"
        assert api.get(JOB) is not None, "the other job is untouched"

    asyncio.run(scenario())


def test_a_job_re_created_under_the_same_name_is_not_deleted_by_the_old_ones_ttl() -> None:
    async def scenario() -> None:
        api = cluster()
        path = finished_with_ttl(api)
        op = Operator(api)
        plan = await op.decide()
        api.objects[path]["metadata"]["uid"] = "uid-the-new-one"  # deleted and created again meanwhile
        outcome = await execute(op.executor, plan)
        assert api.get(path) is not None, "the UID precondition kept the new job"
        assert not outcome.hold and not outcome.failures

    asyncio.run(scenario())


def test_a_finished_job_gone_already_counts_as_deleted() -> None:
    async def scenario() -> None:
        api = cluster()
        path = finished_with_ttl(api)
        op = Operator(api)
        plan = await op.decide()

        def delete_it_first(method: str, the_path: str) -> None:  # someone deleted it just before us: 404
            if method == "DELETE" and the_path == path:
                del api.objects[path]

        api.on_request = delete_it_first
        outcome = await execute(op.executor, plan)
        assert not outcome.hold and not outcome.failures and op.jobs.get("ns", "done") is None

    asyncio.run(scenario())


def test_a_job_delete_in_transient_trouble_holds_the_job_for_another_try() -> None:
    async def scenario() -> None:
        api = cluster()
        path = finished_with_ttl(api)
        op = Operator(api)
        plan = await op.decide()
        api.fail("DELETE", path, 503, times=100)
        outcome = await execute(op.executor, plan)
        assert api.get(path) is not None and "ns/done" in outcome.hold

    asyncio.run(scenario())


def test_transient_bind_errors_are_retried() -> None:
    async def scenario() -> None:
        api = cluster()
        op = Operator(api)
        plan = await op.decide()
        api.fail("POST", "/binding", 503, times=3)
        outcome = await execute(op.executor, plan)
        assert outcome.bound == GANG and not outcome.hold and not outcome.failures
        assert api.count("POST", "/binding") == GANG + 3

    asyncio.run(scenario())


def test_a_bind_that_keeps_failing_transiently_holds_the_job_instead_of_failing_it() -> None:
    async def scenario() -> None:
        api = cluster()
        op = Operator(api)
        plan = await op.decide()
        victim = pod_names(plan)[0]
        api.fail("POST", f"/{victim}/binding", 503, times=100)
        outcome = await execute(op.executor, plan)
        assert "train" in next(iter(outcome.hold)) and not outcome.failures
        assert victim not in bound(api) and len(bound(api)) == GANG - 1

    asyncio.run(scenario())


def test_a_refused_bind_rolls_the_whole_gang_back_on_the_next_pass() -> None:
    async def scenario() -> None:
        api = cluster()
        op = Operator(api)
        plan = await op.decide()
        victim = pod_names(plan)[1]
        api.fail("POST", f"/{victim}/binding", 403, times=1)
        outcome = await execute(op.executor, plan)
        assert list(outcome.failures) == ["ns/train"] and victim in outcome.failures["ns/train"]
        assert len(bound(api)) == GANG - 1, "the others were bound before the refusal was known"
        # all or nothing: the next pass, told of the failure, takes every pod of the gang away and requeues
        rollback = await op.decide(bind_failures=dict(outcome.failures))
        again = await execute(op.executor, rollback)
        assert again.deleted == GANG
        assert api.pods_of("ns", "train") == [], "no pod of a half-bound gang is left"
        status = api.get(JOB)["status"]  # type: ignore[index]
        assert status["phase"] == "Queued" and "placement" not in status
        assert any("gang rolled back" in (c.get("message") or "") for c in status["conditions"])

    asyncio.run(scenario())


def test_a_pod_replaced_before_its_bind_is_not_bound_and_is_re_read() -> None:
    async def scenario() -> None:
        api = cluster()
        op = Operator(api)
        plan = await op.decide()
        victim = pod_names(plan)[2]

        def replace_it(method: str, path: str) -> None:  # deleted and re-created by someone else
            if method == "POST" and path.endswith(f"/{victim}/binding"):
                api.objects[f"{PODS}/{victim}"]["metadata"]["uid"] = "uid-somebody-else"
                api.on_request = None

        api.on_request = replace_it
        outcome = await execute(op.executor, plan)
        assert not outcome.failures and not outcome.hold and outcome.bound == GANG - 1
        assert victim not in bound(api), "the UID precondition kept the replacement unbound"
        assert op.pods.get("ns", victim).uid == "uid-somebody-else"  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_a_pod_deleted_before_its_bind_is_forgotten() -> None:
    async def scenario() -> None:
        api = cluster()
        op = Operator(api)
        plan = await op.decide()
        victim = pod_names(plan)[3]

        def delete_it(method: str, path: str) -> None:
            if method == "POST" and path.endswith(f"/{victim}/binding"):
                del api.objects[f"{PODS}/{victim}"]
                api.on_request = None

        api.on_request = delete_it
        outcome = await execute(op.executor, plan)
        assert not outcome.failures and outcome.bound == GANG - 1
        assert op.pods.get("ns", victim) is None

    asyncio.run(scenario())


# ---- leader election --------------------------------------------------------------------------------------

DURATION, DEADLINE, RETRY = 0.6, 0.4, 0.05
# Past the deadline, not at it: uvloop's clock is read once per loop iteration, so a jump of exactly the
# deadline left "now - renewed" at 0.4 give or take a rounding, and the leader led on or not by chance.
PAUSE = DEADLINE + 2 * RETRY


def candidate(api: FakeApi, who: str, skew: dict[str, float] | None = None) -> LeaderElection:
    loop = asyncio.get_running_loop()
    offsets = skew if skew is not None else {}
    return LeaderElection(
        api.client(who), "ns", "lease", who, DURATION, DEADLINE, RETRY, clock=lambda: loop.time() + offsets.get(who, 0)
    )


async def stop(tasks: list[asyncio.Task[Any]]) -> None:
    # Cancelled more than once if need be: on Python 3.11 ``asyncio.wait_for`` (which the reconcile loop
    # waits in) can swallow a cancellation that arrives as the awaited event fires (CPython gh-86296).
    for _ in range(100):
        pending = [task for task in tasks if not task.done()]
        if not pending:
            break
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.05)
    await asyncio.gather(*tasks, return_exceptions=True)


def test_under_random_partitions_and_errors_two_candidates_never_lead_at_once() -> None:
    async def scenario() -> None:
        api = FakeApi()
        rng = random.Random(7)
        elections = [candidate(api, who) for who in ("a", "b", "c")]
        tasks = [asyncio.create_task(e.run()) for e in elections]
        leaders_seen: set[str] = set()
        loop = asyncio.get_running_loop()
        end = loop.time() + 4.0
        next_chaos = loop.time()
        while loop.time() < end:
            leading = [e.identity for e in elections if e.leading()]
            assert len(leading) <= 1, f"two leaders at once: {leading}"
            leaders_seen.update(leading)
            if loop.time() >= next_chaos:
                who = rng.choice("abc")
                api.hanging ^= {who}  # partition it, or heal its partition
                if rng.random() < 0.3:
                    api.fail("PUT", "/leases/lease", rng.choice((409, 500, 503)), times=rng.randint(1, 3))
                next_chaos = loop.time() + rng.uniform(0.1, 0.6)
            await asyncio.sleep(0.003)
        assert len(leaders_seen) >= 2, "leadership moved when its holder was cut off"
        api.hanging.clear()
        for election in elections:
            election.lost.clear()  # those that stepped down have returned; the others still run
        await stop(tasks)

    asyncio.run(scenario())


def test_a_leader_whose_renewals_fail_steps_down_within_its_renew_deadline() -> None:
    async def scenario() -> None:
        api = FakeApi()
        a = candidate(api, "a")
        task = asyncio.create_task(a.run())
        await asyncio.wait_for(a.leader.wait(), 30)
        loop = asyncio.get_running_loop()
        failing_since = loop.time()
        api.fail("PUT", "/leases/lease", 500, times=10**6)
        await asyncio.wait_for(a.lost.wait(), 30)
        record_time("renewals failing -> leader stepped down", loop.time() - failing_since, DEADLINE + RETRY)
        # What keeps it from acting is its clock, however late a loaded machine lets its loop notice: no
        # renewal counted once they failed, so it led no longer than the renew deadline after failing began.
        assert a._renewed_at is not None and a._renewed_at <= failing_since
        assert not a.leading()
        await asyncio.wait_for(task, 30)  # run() ends: the runtime stops the operator on a lost lease

    asyncio.run(scenario())


def test_a_leader_keeps_its_lease_while_each_renewal_is_slower_than_the_retry_period_but_inside_the_deadline() -> None:
    # A loaded API server answering each lease request in 0.4 s: an attempt (GET + PUT) takes 0.8 s, more than
    # the 0.25 s between renewals but well inside the 2 s renew deadline. Cutting each attempt at the retry
    # period failed every one of them and the leader stepped down; client-go lets it use the deadline.
    async def scenario() -> None:
        api = FakeApi()
        loop = asyncio.get_running_loop()
        a = LeaderElection(api.client("a"), "ns", "lease", "a", 3.0, 2.0, 0.25, clock=loop.time)
        task = asyncio.create_task(a.run())
        await asyncio.wait_for(a.leader.wait(), 30)
        api.latency = lambda method, path: 0.4 if "/leases/" in path else 0.0
        renewed_before = a.renewals
        await asyncio.sleep(4.0)  # two renew deadlines
        assert a.leading() and not a.lost.is_set()
        assert a.renewals >= renewed_before + 2
        await stop([task])

    asyncio.run(scenario())


async def paused_later_leader() -> tuple[FakeApi, LeaderElection, asyncio.Task[None], dict[str, float]]:
    """A leading candidate "a" whose clock the test can jump (``skew["a"]``), as a SIGSTOP then SIGCONT would."""
    api = FakeApi()
    skew: dict[str, float] = {}
    a = candidate(api, "a", skew)
    task = asyncio.create_task(a.run())
    await asyncio.wait_for(a.leader.wait(), 30)
    return api, a, task, skew


def test_a_leader_paused_past_its_renew_deadline_cannot_write_even_before_its_loop_notices() -> None:
    async def scenario() -> None:
        api, a, task, skew = await paused_later_leader()
        kube = api.client("a-writer")
        kube.write_fence = a.leading
        await kube.request("POST", PODS, {"metadata": {"name": "p1"}})
        skew["a"] = PAUSE  # SIGSTOP then SIGCONT: its monotonic clock jumped while it did nothing
        with pytest.raises(NotLeading):
            await kube.request("POST", PODS, {"metadata": {"name": "p2"}})
        assert api.get(f"{PODS}/p2") is None
        await stop([task])

    asyncio.run(scenario())


def test_a_leader_paused_while_its_renewal_is_in_flight_counts_the_pause_against_itself() -> None:
    # The renewal's answer arrives after the pause: had the leader counted its lease from the answer, it
    # would think itself fresh for another renew deadline while a standby may already have taken over.
    async def scenario() -> None:
        api, a, task, skew = await paused_later_leader()
        paused = asyncio.Event()

        def pause_during_renewal(method: str, path: str) -> None:
            if method == "PUT" and path.endswith("/leases/lease") and not paused.is_set():
                skew["a"] = PAUSE
                paused.set()

        api.on_request = pause_during_renewal
        await asyncio.wait_for(paused.wait(), 30)
        for _ in range(5):  # let the renewal's answer come back
            await asyncio.sleep(0)
        assert not a.leading()
        kube = api.client("a-writer")
        kube.write_fence = a.leading
        with pytest.raises(NotLeading):
            await kube.request("POST", PODS, {"metadata": {"name": "p2"}})
        await asyncio.wait_for(a.lost.wait(), 30)
        await stop([task])

    asyncio.run(scenario())


# ---- the reconcile loop ----------------------------------------------------------------------------------


def test_the_loop_survives_a_failing_pass_and_tries_again_after_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        api = cluster()
        kube: FakeKube = api.client()
        rec = Reconciler(kube, OperatorConfig(resync_seconds=3600, identity="test"), Metrics())
        loop = asyncio.get_running_loop()
        attempts: list[float] = []
        real = reconciler_module.decide

        def flaky(*args: Any, **kwargs: Any) -> Any:
            attempts.append(loop.time())
            if len(attempts) == 1:
                raise RuntimeError("a bug in the pass")
            return real(*args, **kwargs)

        monkeypatch.setattr(reconciler_module, "decide", flaky)
        passes: list[float] = []
        rec.on_pass = lambda: passes.append(loop.time())
        for kind, path in (("node", "/api/v1/nodes"), ("pod", "/api/v1/pods"), ("job", job_path("ns"))):
            items, version = await kube.list(path)  # what each kind's reflector hands over first
            rec.on_list(kind, items, version)
        rec.synced.set()
        rec.leader.set()
        task = asyncio.create_task(rec.run())
        try:
            for _ in range(400):
                if len(bound(api)) == GANG:
                    break
                await asyncio.sleep(0.01)
            assert len(bound(api)) == GANG, "the pass after the failure placed and bound the gang"
            assert attempts[1] - attempts[0] >= 0.9, "a failing pass is retried after a pause, not in a tight loop"
            assert passes and passes[0] > attempts[0], "a failed pass is not reported as a pass to /healthz"
        finally:
            await stop([task] + ([rec.events.task] if rec.events.task else []))
            await stop([t for t, _ in rec.inflight.values()])

    asyncio.run(scenario())

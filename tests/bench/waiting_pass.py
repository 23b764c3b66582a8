"""Time the operator's real reconcile pass with thousands of jobs waiting (issue 29's pass targets).

    python -m tests.bench.waiting_pass [WAITING] [QUEUES] [NODES] [--full] [--finished=N]
        [--arrivals=K [--finish] [--land=B] [--backlog=N]] [--refresh=S]
    (default: 10000 200 200)

A cluster of NODES 8-GPU nodes is filled by small ParallelJobs (TP 1-2 x DP 1-4, round-robin over QUEUES
queues) decided by the in-memory harness until it settles: the cluster full, about WAITING jobs Queued. The
settled objects are then handed to a real ``Reconciler`` (kept view, stores, waiting memo, gauges, queue
statuses: everything ``pass_once`` does but the API writes, which are not started), and it prints the median
of 15 passes with nothing changed, and the pass right after one running job's workers finished (each of 15
finishes measured alone; ``--full``: without the waiting memo, every pass looks at every job, as before
issue 29), as wall time and as the process's CPU time (on a shared machine the wall time also
counts the time other processes held the CPU), and of 15 /metrics renders each right after a pass (the
pass's gauges are worked out then, when read). ``--finished=N``: N more jobs that ran and Succeeded, with
their pods, as a drained queue leaves them. ``--arrivals=K``: a flood instead; before each of 15 measured
passes K new jobs (the same shapes, created now) join random queues (seeded), and the status
writes the pass before decided land as the API server would answer them (a MODIFIED event with the written
status; not timed): each pass decides the K new jobs and last pass's K whose first write landed, with the
waiting total growing by K a pass; ``--finish``: one running job's workers finish before each of those passes
too (GPUs come free every pass, as in a live flood). ``--land=B``: the API server is saturated, and only
the B oldest status writes in flight land before each pass; the others' chains stay in flight (the job busy,
a background chain held: ``OperatorConfig.background_chains``, 512), so new jobs pile up without their first
status write, as in issue 29's flood; ``--backlog=N``: N such new jobs are there before the first measured
pass (two passes, not timed, started their chains). The flood also counts the status writes a pass starts
for jobs Queued before and after it (a waiting job's new reason or message: a line's new head, a head's
message); ``--refresh=S``: ``OperatorConfig.waiting_message_refresh_s`` (default: the operator's, 30 s; 0:
every changed message is written). Not collected by pytest: a measurement, not a test.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime as dt
import itertools
import random
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.edge.constants import GROUP, JOB_LABEL, VERSION
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.runtime.memory import gctuning
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.reconciler import Reconciler
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

REPEATS = 15
QUEUED = Phase.QUEUED
_rv = itertools.count(10**9)


def settled(waiting: int, queues: int, nodes: int) -> FakeCluster:
    names = [f"q{i:04d}" for i in range(queues)]
    from paralleljob.k8s.edge.parse.queues import QueueInfo

    fc = FakeCluster(
        [node(f"gpu-node-{i:04d}", leaf=f"leaf-{i // 8:03d}") for i in range(nodes)],
        queues={name: QueueInfo(name) for name in names},
        memo=True,
    )
    total = waiting + nodes * 8 // 3  # the jobs average ~3 GPUs: this many leaves about WAITING queued
    for i in range(total):
        stamp = f"2024-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        fc.add_job(paralleljob(f"j{i:05d}", 1 + i % 2, 1, 1 + i % 4, queue=names[i % queues], created=stamp))
    fc.settle(5)
    return fc


def add_finished(fc: FakeCluster, count: int) -> None:
    """``count`` more jobs that ran and Succeeded, their pods still there (what a drained queue leaves):
    one job finished for real on the cluster, then copied under new names and UIDs."""
    if count <= 0:
        return
    key = next(k for k, b in sorted(fc.jobs.items()) if (b.get("status") or {}).get("phase") == "Running")
    for pod in fc.job_pods(key):
        done = copy.deepcopy(pod)
        done["status"]["phase"] = "Succeeded"
        fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = done
    fc.settle(3)
    job, pods = (
        fc.jobs.pop(key),
        [fc.pods.pop((p["metadata"]["namespace"], p["metadata"]["name"])) for p in fc.job_pods(key)],
    )
    assert (job.get("status") or {}).get("phase") == "Succeeded", job.get("status")
    old_name = job["metadata"]["name"]
    for i in range(count):
        name = f"done{i:05d}"
        clone = copy.deepcopy(job)
        clone["metadata"].update(name=name, uid=f"uid-{name}")
        fc.jobs[f"{clone['metadata']['namespace']}/{name}"] = clone
        for pod in pods:
            twin = copy.deepcopy(pod)
            pod_name = twin["metadata"]["name"].replace(old_name, name, 1)
            twin["metadata"].update(name=pod_name, uid=f"uid-pod-{pod_name}")
            twin["metadata"]["labels"] = {**twin["metadata"]["labels"], JOB_LABEL: name}
            twin["metadata"]["ownerReferences"] = [
                {**twin["metadata"]["ownerReferences"][0], "name": name, "uid": f"uid-{name}"}
            ]
            fc.pods[(twin["metadata"]["namespace"], pod_name)] = twin


def queue_body(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": name}, "spec": {}}


async def measure(
    fc: FakeCluster,
    full: bool = False,
    arrivals: int = 0,
    finish: bool = False,
    land: int | None = None,
    backlog: int = 0,
    refresh: float | None = None,
) -> dict[str, float]:
    config = OperatorConfig(view_check_passes=0)
    if refresh is not None:
        config = dataclasses.replace(config, waiting_message_refresh_s=refresh)
    reconciler = Reconciler(cast(Any, object()), config, Metrics())
    if full:
        reconciler.waiting = cast(Any, None)  # decide() without a memo: the full pass
    started_chains: list[JobActions] = []
    landing: dict[str, asyncio.Future[None]] = {}  # --land: job key -> its chain's write, landed when resolved

    async def nothing(actions: JobActions, outcome: object) -> None:
        started_chains.append(actions)
        if land is not None and actions.writes_status and flooding:
            landing[actions.job.key] = asyncio.get_running_loop().create_future()
            await landing[actions.job.key]
        return None

    flooding = False  # the settling passes' chains end at once (their writes are already in the bodies)

    reconciler.executor.run_job = nothing  # type: ignore[method-assign]  # the pass, not its writes
    reconciler.report.queue_status = lambda plan: None  # type: ignore[method-assign]  # (computed in the pass)
    reconciler.on_list("node", [copy.deepcopy(b) for b in fc.nodes.values()], "1")
    reconciler.on_list("pod", [copy.deepcopy(b) for b in fc.pods.values()], "1")
    reconciler.on_list("job", [copy.deepcopy(b) for b in fc.jobs.values()], "1")
    reconciler.on_list("queue", [queue_body(name) for name in fc.queues], "1")

    # the operator's garbage collection (runtime/memory/gctuning.py): thresholds tuned, the heap frozen as its
    # scheduled collection leaves it
    gctuning.tune()
    gctuning.collect(whole=True)
    cpu: list[float] = []

    async def timed() -> float:
        # CPU time too: on a shared machine the wall time also counts the time others held the CPU
        started, started_cpu = time.perf_counter(), time.process_time()
        await reconciler.pass_once()
        cpu.append((time.process_time() - started_cpu) * 1e3)
        return (time.perf_counter() - started) * 1e3

    first = await timed()
    await timed()
    if arrivals:
        flooding = True
        return await flood(
            reconciler, fc, arrivals, timed, cpu, started_chains, first, finish, Landing(land, landing), backlog
        )
    idle = [await timed() for _ in range(REPEATS)]
    idle_cpu = cpu[-REPEATS:]
    left_out = reconciler.metrics.registry.get_sample_value("paralleljob_pass_waiting_left_out") or 0.0
    scrapes: list[float] = []  # /metrics after a pass: the pass's gauges are worked out when read
    for _ in range(REPEATS):
        await reconciler.pass_once()
        started = time.perf_counter()
        reconciler.metrics.render()
        scrapes.append((time.perf_counter() - started) * 1e3)
    running = sorted(k for k, b in fc.jobs.items() if (b.get("status") or {}).get("phase") == "Running")
    after: list[float] = []
    for key in running[:REPEATS]:
        for pod in fc.job_pods(key):
            done = copy.deepcopy(pod)
            done["status"]["phase"] = "Succeeded"
            done["metadata"]["resourceVersion"] = str(next(_rv))
            reconciler.on_event("pod", "MODIFIED", done)
        after.append(await timed())
        reconciler.inflight.clear()  # its chain was not run: the next finish is measured on its own
    after_cpu = cpu[-len(after) :]
    return {
        "first_pass_ms": round(first, 1),
        "idle_pass_ms_median": round(statistics.median(idle), 2),
        "after_one_finish_ms_median": round(statistics.median(after), 2),
        "after_one_finish_ms_max": round(max(after), 2),
        "idle_pass_cpu_ms_median": round(statistics.median(idle_cpu), 2),
        "after_one_finish_cpu_ms_median": round(statistics.median(after_cpu), 2),
        "waiting_left_out": left_out,
        "scrape_ms_median": round(statistics.median(scrapes), 2),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


class Landing:
    """--land: the status writes in flight, oldest first, and how many land before each pass (None: all)."""

    def __init__(self, per_pass: int | None, futures: dict[str, asyncio.Future[None]]) -> None:
        self.per_pass, self.futures = per_pass, futures

    def due(self, chains: list[JobActions]) -> list[JobActions]:
        """The chains whose writes land now (and end): all, or the ``per_pass`` oldest still waiting."""
        if self.per_pass is None:
            return list(chains)
        waiting = [a for a in chains if a.job.key in self.futures and not self.futures[a.job.key].done()]
        return [a for a in chains if not a.writes_status] + waiting[: self.per_pass]

    def end(self, actions: JobActions) -> None:
        future = self.futures.pop(actions.job.key, None)
        if future is not None and not future.done():
            future.set_result(None)


async def flood(
    reconciler: Reconciler,
    fc: FakeCluster,
    count: int,
    timed: Callable[[], Awaitable[float]],
    cpu: list[float],
    chains: list[JobActions],
    first: float,
    finish: bool = False,
    landing: Landing | None = None,
    backlog: int = 0,
) -> dict[str, float]:
    """``REPEATS`` passes, each after ``count`` new jobs joined random queues and the last pass's status
    writes landed (``finish``: and one running job's workers finished; ``landing``: only so many of them)."""
    landing = landing or Landing(None, {})
    running = iter(sorted(k for k, b in fc.jobs.items() if (b.get("status") or {}).get("phase") == "Running"))
    names = sorted(fc.queues)
    rng = random.Random(29)
    serial = itertools.count()
    wall: list[float] = []
    decided: list[int] = []
    bodies = {key: copy.deepcopy(body) for key, body in fc.jobs.items()}
    for _ in range(3):
        await asyncio.sleep(0)  # the settling passes' chains (stubbed) start and end
    chains.clear()
    held_back: list[int] = []
    rewrites: list[int] = []  # status writes started a pass for jobs Queued before and after it

    def arrive(how_many: int) -> None:
        for _ in range(how_many):
            i = next(serial)
            # created now, as the API server stamps it (the pass writes queuedAt now too): a new job goes by
            # its creation until then, so a stamp from the past would put it ahead of jobs accepted since
            stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = paralleljob(f"new{i:06d}", 1 + i % 2, 1, 1 + i % 4, queue=rng.choice(names), created=stamp)
            bodies[f"{body['metadata']['namespace']}/{body['metadata']['name']}"] = body
            reconciler.on_event("job", "ADDED", copy.deepcopy(body))

    async def land() -> None:
        due = landing.due(chains)
        for actions in due:  # what the API server would answer each status write with
            if actions.writes_status:
                body = bodies[actions.job.key] = copy.deepcopy(bodies[actions.job.key])
                body["status"] = {k: v for k, v in actions.draft.data.items() if v is not None}
                body["metadata"]["resourceVersion"] = str(next(_rv))
                reconciler.on_event("job", "MODIFIED", body)
            landing.end(actions)
        ended = {id(a) for a in due}
        chains[:] = [a for a in chains if id(a) not in ended]
        if landing.per_pass is None:
            reconciler.inflight.clear()
        for _ in range(3):
            await asyncio.sleep(0)  # the chains that landed end

    if backlog:
        arrive(backlog)
        for _ in range(2):  # not timed: they start the chains the API server is slow to answer
            await reconciler.pass_once()
            for _ in range(3):
                await asyncio.sleep(0)
    for _ in range(REPEATS):
        await land()
        arrive(count)
        for key in [next(running)] if finish else []:
            for pod in fc.job_pods(key):
                done = copy.deepcopy(pod)
                done["status"]["phase"] = "Succeeded"
                done["metadata"]["resourceVersion"] = str(next(_rv))
                reconciler.on_event("pod", "MODIFIED", done)
        before = len(chains)
        wall.append(await timed())
        held_back.append(reconciler.held_back)
        for _ in range(3):
            await asyncio.sleep(0)  # its chains (stubbed) start and end
        decided.append(len(chains) - before)
        rewrites.append(sum(1 for a in chains[before:] if a.writes_status and a.job.phase is a.draft.phase is QUEUED))
    waiting = reconciler.metrics.registry.get_sample_value("paralleljob_pass_waiting_left_out") or 0.0
    unwritten = sum(1 for body in bodies.values() if not (body.get("status") or {}).get("phase"))
    for future in list(landing.futures.values()):
        future.cancel()
    return {
        "first_pass_ms": round(first, 1),
        "arrivals_per_pass": count,
        "pass_ms_median": round(statistics.median(wall), 2),
        "pass_ms_max": round(max(wall), 2),
        "pass_cpu_ms_median": round(statistics.median(cpu[-REPEATS:]), 2),
        "chains_per_pass_median": statistics.median(decided),
        "waiting_left_out_last": waiting,
        "held_back_median": statistics.median(held_back),
        "queued_rewrites_per_pass": sum(rewrites) / len(rewrites),
        "without_first_write_last": unwritten,
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str]) -> None:
    full = "--full" in argv
    finished = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--finished=")), 0)
    arrivals = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--arrivals=")), 0)
    finish = "--finish" in argv
    land = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--land=")), None)
    backlog = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--backlog=")), 0)
    refresh = next((float(a.split("=", 1)[1]) for a in argv if a.startswith("--refresh=")), None)
    options = ("--finished=", "--arrivals=", "--land=", "--backlog=", "--refresh=")
    argv = [a for a in argv if a not in ("--full", "--finish") and not a.startswith(options)]
    waiting, queues, nodes = (int(a) for a in (argv + ["10000", "200", "200"][len(argv) :])[:3])
    started = time.perf_counter()
    fc = settled(waiting, queues, nodes)
    add_finished(fc, finished)
    phases: dict[str, int] = {}
    for body in fc.jobs.values():
        phase = str((body.get("status") or {}).get("phase"))
        phases[phase] = phases.get(phase, 0) + 1
    print(f"settled in {time.perf_counter() - started:.1f} s: {phases}")
    print(asyncio.run(measure(fc, full, arrivals, finish, land, backlog, refresh)))


if __name__ == "__main__":
    main(sys.argv[1:])

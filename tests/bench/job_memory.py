"""What the operator keeps per ParallelJob, in bytes, broken down by where it is kept (issue 29: 50,000 jobs
over 1,000 queues with the operator's RSS at most 500 MB).

    python -m tests.bench.job_memory [JOBS] [QUEUES] [--applied | --finished]   (default: 20000 1000)

JOBS flood jobs (``paralleljob bench jobs``' own bodies: ``devtools/bench_jobs.flood_body``) wait in QUEUES
queues on a full cluster, each with the status the operator wrote for it, as the API server hands them over:
the CRD's defaults filled in, ``metadata.managedFields`` for the create and for the operator's status update
(fieldsV1 written out from the body, as the API server derives it; conditions keyed by type), and with
``--applied`` the ``kubectl.kubernetes.io/last-applied-configuration`` annotation ``kubectl apply`` adds. The
statuses are real: a small cluster is settled by the in-memory harness, and each of its Queued jobs is then
the pattern for many (new name, UID, times and run time; same queue, shape and status words).

Each body is encoded to JSON and decoded again on its own before the reconciler sees it (fresh strings and
dicts, as the API client's decoder gives them), and fed to a real ``Reconciler`` as a watch event; then one
pass runs (everything ``pass_once`` does but the API writes). It prints, per job: the decoded body as
received (nothing shared), what the job store keeps of the body (the reconciler's keeps none, only each
job's ``Version``: ``store_body_bytes_per_job``), the parsed JobObject beyond that, the
waiting memo and other reconciler state beyond those (object sizes walked with ``sys.getsizeof``, each
object counted once however many jobs share it), and the process's RSS growth from before the first job
to after the pass, divided by the jobs. Not collected by pytest: a measurement, not a test.

With ``--finished`` the jobs are the other half of a drained queue without ``ttlSecondsAfterFinished``:
Succeeded, each with its placement record in status and its worker pods as kwok leaves them (Succeeded, the
container terminated with exit code 0, conditions, IPs and times; ``managedFields`` for the operator's
create and binding and kwok's status updates), fed as watch events; the pods' share is printed apart.

Last, for waiting jobs: what a pass deciding every line allocates per job decided and frees again
(``decide_all_transient_bytes_per_job``, traced with tracemalloc, which slows that pass several times).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import gc
import json
import os
import random
import re
import sys
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any, cast

from paralleljob.devtools.bench_jobs import flood_body
from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.edge.constants import API_VERSION
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.runtime.reconciler import Reconciler
from tests.bench.waiting_pass import queue_body
from tests.k8s.factories import node
from tests.k8s.harness import FakeCluster

NAMESPACE = "bench"
# The CRD's defaults (crds/paralleljob.yaml) the API server fills into every created job's spec.
SPEC_DEFAULTS: dict[str, Any] = {
    "gpuMemoryGiB": 0,
    "rankOrder": "tp-dp-pp",
    "costModel": "seed",
    "queue": "default",
    "priority": 0,
    "preemptible": True,
}
POLICY_DEFAULTS = {
    "strategy": "minimal",
    "maxRestarts": 3,
    "onUnplaceable": "Requeue",
    "reoptimize": "MigrateAtCheckpoint",
}
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def created(body: dict[str, Any], name: str, stamp: str, rng: random.Random) -> dict[str, Any]:
    """``body`` as the API server stores it after a create: identity, times and the CRD's defaults."""
    out = copy.deepcopy(body)
    out["metadata"].update(
        name=name,
        namespace=NAMESPACE,
        uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        generation=1,
        resourceVersion=str(rng.randrange(10**6, 10**8)),
        creationTimestamp=stamp,
    )
    out["spec"] = {**SPEC_DEFAULTS, **out["spec"]}
    out["spec"]["failurePolicy"] = {**POLICY_DEFAULTS, **out["spec"].get("failurePolicy", {})}
    return out


def fields_v1(value: Any) -> dict[str, Any]:
    """The fieldsV1 set of ``value`` as the API server writes it: ``f:`` per key, ``k:`` per keyed list item."""
    if isinstance(value, dict):
        return {".": {}, **{f"f:{k}": fields_v1(v) for k, v in value.items()}}
    if isinstance(value, list) and value and all(isinstance(v, dict) and "type" in v for v in value):
        return {
            ".": {},
            **{"k:" + json.dumps({"type": v["type"]}, separators=(",", ":")): fields_v1(v) for v in value},
        }
    return {}


def managed_fields(spec_body: dict[str, Any], status: dict[str, Any], stamp: str) -> list[dict[str, Any]]:
    """The create's entry (the client that posted the spec) and the operator's status update's."""
    sent = {k: v for k, v in spec_body.items() if k in ("metadata", "spec")}
    sent_fields = {k: v for k, v in fields_v1(sent).items() if k != "."}
    sent_fields.get("f:metadata", {}).pop(".", None)
    for key in ("f:name", "f:namespace"):  # identity is not a managed field
        sent_fields.get("f:metadata", {}).pop(key, None)
    if not sent_fields.get("f:metadata"):
        sent_fields.pop("f:metadata", None)
    entry = {"apiVersion": API_VERSION, "fieldsType": "FieldsV1", "operation": "Update", "time": stamp}
    return [
        {"manager": "python-aiohttp", **entry, "fieldsV1": sent_fields},
        {
            "manager": "paralleljob-operator",
            **entry,
            "fieldsV1": {"f:status": fields_v1(status)},
            "subresource": "status",
        },
    ]


def settled_cluster(queues: int, rng: random.Random) -> FakeCluster:
    """A full cluster with a few jobs Queued per queue, with the statuses the operator's pass gave them."""
    names = [f"q{i:04d}" for i in range(queues)]
    fc = FakeCluster(
        [node(f"gpu-node-{i:03d}", leaf=f"leaf-{i // 8:03d}") for i in range(4)],
        queues={name: QueueInfo(name) for name in names},
        memo=True,
    )
    for i in range(3 * queues + 16):
        body = flood_body(f"pattern-{i:05d}", rng, queues, (600.0, 600.0))
        body["spec"]["queue"] = names[i % queues]
        fc.add_job(created(body, f"pattern-{i:05d}", f"2026-11-27T10:{i // 60 % 60:02d}:{i % 60:02d}Z", rng))
    fc.settle(5)
    return fc


def flood(jobs: int, queues: int, applied: bool, rng: random.Random, fc: FakeCluster) -> Iterator[bytes]:
    """Each job's JSON as the API server sends it, each a Queued job of ``fc`` under another name."""
    patterns = [b for b in fc.jobs.values() if _behind_head(b)]
    for i in range(jobs):
        pattern = patterns[i % len(patterns)]
        stamp = f"2026-11-27T{11 + i // 3600 % 12:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        spec_body = flood_body(f"flood-{i:06d}", rng, queues, (600.0, 600.0))
        spec_body["spec"]["queue"] = pattern["spec"]["queue"]
        spec_body["spec"]["parallelism"] = dict(pattern["spec"]["parallelism"])
        body = created(spec_body, f"flood-{i:06d}", stamp, rng)
        if applied:
            sent = {
                "apiVersion": API_VERSION,
                "kind": body["kind"],
                "metadata": {"name": body["metadata"]["name"], "namespace": NAMESPACE},
                "spec": spec_body["spec"],
            }
            body["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(sent, separators=(",", ":")) + "\n"}
            spec_body["metadata"]["annotations"] = {LAST_APPLIED: ""}
        status = copy.deepcopy(pattern["status"])
        status["queuedAt"] = stamp
        for condition in status.get("conditions") or []:
            condition["lastTransitionTime"] = stamp
        body["status"] = status
        body["metadata"]["managedFields"] = managed_fields(spec_body, status, stamp)
        yield json.dumps(body).encode()


def finished_cluster(queues: int, rng: random.Random) -> FakeCluster:
    """A small cluster whose flood-shaped jobs all ran and Succeeded: their pods completed as kwok completes
    them, the operator's passes recording each job's end."""
    fc = FakeCluster(
        [node(f"gpu-node-{i:03d}", leaf=f"leaf-{i // 8:03d}") for i in range(4)],
        queues={f"q{i:04d}": QueueInfo(f"q{i:04d}") for i in range(queues)},
        memo=True,
    )
    for i in range(48):
        body = flood_body(f"pattern-{i:05d}", rng, queues, (600.0, 600.0))
        fc.add_job(created(body, f"pattern-{i:05d}", f"2026-11-27T10:00:{i:02d}Z", rng))
    for _ in range(60):
        fc.settle(3)
        for key, pod in list(fc.pods.items()):
            if pod["status"].get("phase") == "Running":
                fc.pods[key] = kwok_completed(pod)
        if all(fc.phase(k) == "Succeeded" for k in fc.jobs):
            return fc
    raise RuntimeError("the pattern jobs did not all finish")


def kwok_completed(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the API server hands it over once kwok has run and completed it."""
    out = copy.deepcopy(pod)
    stamp = "2026-11-27T10:05:00Z"
    containers = out["spec"].get("containers") or []
    out["status"] = {
        "phase": "Succeeded",
        "conditions": [
            {
                "type": t,
                "status": "False" if t == "Ready" else "True",
                "lastProbeTime": None,
                "lastTransitionTime": stamp,
            }
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "hostIP": "10.0.0.1",
        "hostIPs": [{"ip": "10.0.0.1"}],
        "podIP": "10.0.7.3",
        "podIPs": [{"ip": "10.0.7.3"}],
        "startTime": stamp,
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp, "finishedAt": stamp}
                },
            }
            for c in containers
        ],
    }
    entry = {"apiVersion": "v1", "fieldsType": "FieldsV1", "time": stamp}
    out["metadata"]["creationTimestamp"] = stamp
    out["metadata"]["managedFields"] = [
        {"manager": "paralleljob-operator", "operation": "Update", **entry, "fieldsV1": fields_v1(pod["spec"])},
        {
            "manager": "kwok",
            "operation": "Update",
            "subresource": "status",
            **entry,
            "fieldsV1": fields_v1(out["status"]),
        },
    ]
    return out


def finished_flood(jobs: int, rng: random.Random, fc: FakeCluster) -> Iterator[tuple[bytes, list[bytes]]]:
    """Each Succeeded job's JSON and its pods', as the API server sends them: a job of ``fc`` renamed."""
    patterns = [(body, fc.job_pods(key)) for key, body in sorted(fc.jobs.items())]
    for i in range(jobs):
        body, pods = patterns[i % len(patterns)]
        old_name, old_uid = body["metadata"]["name"], body["metadata"]["uid"]
        name, uid = f"flood-{i:06d}", str(uuid.UUID(int=rng.getrandbits(128), version=4))
        body = {**body, "metadata": {**body["metadata"], "managedFields": managed_fields(body, body["status"], "")}}
        job = _retimed(json.dumps(body).replace(old_name, name).replace(old_uid, uid), i)
        renamed = []
        for pod in pods:
            pod_uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            text = json.dumps(pod).replace(old_name, name).replace(old_uid, uid)
            renamed.append(_retimed(text.replace(pod["metadata"]["uid"], pod_uid), i).encode())
        yield job.encode(), renamed


def _retimed(text: str, i: int) -> str:
    """``text`` with the harness's times moved to job ``i``'s own (jobs of a drain start and end apart)."""
    start = dt.datetime(2026, 11, 27, tzinfo=dt.UTC) + dt.timedelta(seconds=2 * i)

    def moved(match: re.Match[str]) -> str:
        at = start + dt.timedelta(minutes=int(match[1]), seconds=int(match[2]))
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")

    return re.sub(r"20(?:24-01-01T00|26-11-27T10):(\d\d):(\d\d)Z", moved, text)


def _behind_head(body: dict[str, Any]) -> bool:
    """A Queued job behind its queue's head: a copy of it with a later queue time waits with the same words."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Placed" and c.get("reason") == "Waiting" for c in conditions)


def deep_size(root: Any, seen: set[int]) -> int:
    """Bytes of everything reachable from ``root`` not in ``seen`` (then added to it): containers, strings,
    numbers and slotted or plain objects; classes, functions and modules are not followed."""
    total, stack = 0, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type) or (callable(obj) and not hasattr(obj, "__slots__")):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, str | bytes | int | float | bool) or obj is None:
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        else:
            for cls in type(obj).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if hasattr(obj, slot):
                        stack.append(getattr(obj, slot))
            if hasattr(obj, "__dict__"):
                stack.append(vars(obj))
    return total


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def measure(jobs: int, queues: int, applied: bool, finished: bool = False) -> dict[str, Any]:
    reconciler = Reconciler(cast(Any, object()), OperatorConfig(view_check_passes=0), Metrics())

    launched: list[str] = []

    async def nothing(actions: JobActions, outcome: object) -> None:
        launched.append(actions.job.key)

    reconciler.executor.run_job = nothing  # type: ignore[method-assign,assignment]  # the pass, not its writes
    reconciler.report.queue_status = lambda plan: None  # type: ignore[method-assign]
    rng = random.Random(7)
    fc = settled_cluster(queues, rng)
    reconciler.on_list("node", [copy.deepcopy(b) for b in fc.nodes.values()], "1")
    reconciler.on_list("pod", [copy.deepcopy(b) for b in fc.pods.values()], "1")
    reconciler.on_list("queue", [queue_body(f"q{i:04d}") for i in range(queues)], "1")
    reconciler.on_list("job", [copy.deepcopy(b) for b in fc.jobs.values()], "1")
    await reconciler.pass_once()
    await asyncio.sleep(0)
    reconciler.inflight.clear()
    launched.clear()
    state = rng.getstate()  # the same flood again for the re-list
    if finished:
        stream: Iterator[tuple[bytes, list[bytes]]] = finished_flood(jobs, rng, finished_cluster(queues, rng))
    else:
        stream = ((raw, []) for raw in flood(jobs, queues, applied, rng, fc))
    received = 0
    gc.collect()
    rss_before = rss_bytes()
    started = time.perf_counter()
    for i, (raw, pods) in enumerate(stream):
        for pod in pods:
            reconciler.on_event("pod", "ADDED", json.loads(pod))
        body = json.loads(raw)
        if i < 200:  # what one decoded body costs with nothing shared (a sample: the bodies are alike)
            received += deep_size(body, set())
        reconciler.on_event("job", "ADDED", body)
        del body
    load_s = time.perf_counter() - started
    await reconciler.pass_once()
    await asyncio.sleep(0)
    reconciler.inflight.clear()
    await reconciler.pass_once()  # the memo keeps what the pass before decided with nothing to write
    gc.collect()
    rss_after = rss_bytes()
    ours = {f"flood-{i:06d}" for i in range(jobs)}
    # what the store keeps beside the parsed value: the body, or without bodies its Version
    kept = reconciler.jobs._bodies if getattr(reconciler.jobs, "keep_bodies", True) else reconciler.jobs._versions
    bodies = [b for (ns, name), b in kept.items() if name in ours]
    values = [v for (ns, name), v in reconciler.jobs._values.items() if name in ours]
    seen: set[int] = set()
    body_bytes = deep_size(bodies, seen) - sys.getsizeof(bodies)
    value_bytes = deep_size(values, seen) - sys.getsizeof(values)
    pod_bodies = [b for (ns, name), b in reconciler.pods._bodies.items() if name.startswith("flood-")]
    pod_values = [v for (ns, name), v in reconciler.pods._values.items() if name.startswith("flood-")]
    pod_bytes = deep_size((pod_bodies, pod_values), seen) - sys.getsizeof(pod_bodies) - sys.getsizeof(pod_values)
    deep_size((list(kept.values()), reconciler.jobs.values()), seen)  # the settled jobs'
    memo_bytes = deep_size(reconciler.waiting, seen)
    phases: dict[str, int] = {}
    for v in values:
        phases[v.phase.value] = phases.get(v.phase.value, 0) + 1
    return {
        "jobs": jobs,
        "queues": queues,
        "applied": applied,
        "phases": phases,
        "memo_waiting_jobs": len(reconciler.waiting.jobs),
        "chains_launched": len(launched),  # 0: every flood job Queued as its status says, nothing to write
        "received_body_bytes_per_job": round(received / min(jobs, 200)),
        "store_body_bytes_per_job": round(body_bytes / jobs),
        "parsed_beyond_body_bytes_per_job": round(value_bytes / jobs),
        "memo_beyond_those_bytes_per_job": round(memo_bytes / jobs),
        "pods": len(pod_bodies),
        "pod_store_bytes_per_job": round(pod_bytes / jobs),
        "rss_growth_bytes_per_job": round((rss_after - rss_before) / jobs),
        "rss_after_mb": round(rss_after / 2**20, 1),
        "load_s": round(load_s, 1),
        "relist_rss_growth_mb": None if finished else await relist(reconciler, jobs, queues, applied, state, fc),
        "decide_all_transient_bytes_per_job": None if finished else await decide_all(reconciler),
    }


async def decide_all(reconciler: Reconciler) -> int:
    """What a pass that decides every line allocates per job decided and frees again (tracemalloc's peak
    over what it holds after): live, a pass after GPUs come free decides every line whose head might use
    them, and the small-object pools keep such a peak for good. The waiting memo is cleared to make it so."""
    gc.collect()
    reconciler.waiting.clear()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        await reconciler.pass_once()
        await asyncio.sleep(0)
        reconciler.inflight.clear()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return round((peak - current) / len(reconciler.jobs))


async def relist(reconciler: Reconciler, jobs: int, queues: int, applied: bool, state: Any, fc: FakeCluster) -> float:
    """What a re-list of every job adds to the RSS: the reflector holds each page's items, slimmed as the
    page arrives (the store's list transform), until the last page is in; the store keeps its equal bodies."""
    rng = random.Random()
    rng.setstate(state)
    store = reconciler.jobs
    transform = getattr(store, "slim_listed", store.slim)  # (the starting commit slimmed every item anew)
    gc.collect()
    before = rss_bytes()
    items = [transform(json.loads(raw)) for raw in flood(jobs, queues, applied, rng, fc)]
    items += [copy.deepcopy(b) for b in fc.jobs.values()]
    grown = rss_bytes() - before
    reconciler.on_list("job", items, "1", slimmed=True)
    assert len(store) == len(items)
    return round(grown / 2**20, 1)


def main(argv: list[str]) -> None:
    applied, finished = "--applied" in argv, "--finished" in argv
    argv = [a for a in argv if a not in ("--applied", "--finished")]
    jobs, queues = (int(a) for a in (argv + ["20000", "1000"][len(argv) :])[:2])
    print(json.dumps(asyncio.run(measure(jobs, queues, applied, finished))))


if __name__ == "__main__":
    main(sys.argv[1:])

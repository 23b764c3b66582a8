"""The one way in: paged lists (slimmed page by page, restarted when the continue token expired), what the
stores keep of a body (slimmed, yet parsed exactly as the whole body), optional kinds, periodic re-lists, and
ParallelJobs listed per namespace."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any, cast

from aiohttp import web

from paralleljob.devcluster.nodes import NodeShape, gpu_node_manifest
from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.slim import slim_node, without_managed_fields
from paralleljob.k8s.runtime.api import ApiError
from paralleljob.k8s.runtime.reflector import RELIST_COST_FACTOR, Receiver, Reflector, Watched
from paralleljob.k8s.view.store import ObjectStore
from tests.k8s.localserver import serve

MANAGED = [{"manager": "kwok", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]


def kwok_node(index: int, **status: Any) -> dict[str, Any]:
    """A node as the dev cluster's kwok reports it: managed fields, heartbeats, node info and all."""
    body = gpu_node_manifest(NodeShape(count=4, gpus_per_node=8, nodes_per_rack=2), index)
    body["metadata"].update(uid=f"uid-{index}", resourceVersion=str(10 + index), managedFields=MANAGED)
    conditions = [
        {"type": t, "status": "True" if t == "Ready" else "False", "reason": f"Kubelet{t}", "message": "m",
         "lastHeartbeatTime": "2026-11-23T19:33:05Z", "lastTransitionTime": "2026-11-23T19:00:00Z"}
        for t in ("Ready", "MemoryPressure", "GPUHealthy")
    ]  # fmt: skip
    body["status"] = {
        **body.get("status", {}),
        "conditions": conditions,
        "nodeInfo": {"kubeletVersion": "kwok", "architecture": "amd64"},
        "addresses": [{"address": "127.0.0.1", "type": "InternalIP"}],
        "images": [{"names": ["registry/x:1"], "sizeBytes": 1}],
        **status,
    }
    return body


def test_a_slimmed_node_parses_exactly_as_the_whole_body_and_slimming_is_idempotent() -> None:
    topology = OperatorConfig().topology
    bodies = [kwok_node(0), kwok_node(1), kwok_node(2)]
    bodies[1]["spec"] = {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    bodies[1]["status"]["conditions"][0].update(status="False", reason="KubeletStopped")
    bodies[2]["metadata"]["annotations"] = {"paralleljob.dev/unhealthy-gpus": "1,3", "other": "x"}
    bodies[2]["status"]["conditions"][2]["status"] = "False"
    for body in bodies:
        original = copy.deepcopy(body)
        slim = slim_node(body)
        assert body == original  # pure: the body it was given is untouched
        assert parse_node(slim, topology) == parse_node(body, topology)
        assert slim_node(slim) == slim
        assert "managedFields" not in slim["metadata"] and set(slim["status"]) == {"allocatable", "conditions"}
        assert all("lastHeartbeatTime" not in c for c in slim["status"]["conditions"])
    # A heartbeat alone leaves the slimmed body as it was.
    beat = copy.deepcopy(bodies[0])
    for condition in beat["status"]["conditions"]:
        condition["lastHeartbeatTime"] = "2026-11-23T19:34:05Z"
    assert slim_node(beat) == slim_node(bodies[0])


def test_without_managed_fields_keeps_everything_else() -> None:
    pod = {"metadata": {"name": "p", "managedFields": MANAGED, "labels": {"a": "b"}}, "spec": {"x": 1}}
    assert without_managed_fields(pod) == {"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}}
    assert pod["metadata"]["managedFields"] == MANAGED


def test_the_store_keeps_slimmed_bodies() -> None:
    store: ObjectStore[Any] = ObjectStore(lambda body: parse_node(body, OperatorConfig().topology), slim=slim_node)
    store.upsert(kwok_node(0))
    kept = store.body("", "gpu-node-000")
    assert kept is not None and "managedFields" not in kept["metadata"] and "images" not in kept["status"]


def test_a_namespace_list_replaces_only_that_namespace() -> None:
    store: ObjectStore[str] = ObjectStore(lambda body: str(body["metadata"]["name"]))

    def job(namespace: str, name: str) -> dict[str, Any]:
        uid = f"{namespace}-{name}"
        return {"metadata": {"namespace": namespace, "name": name, "uid": uid, "resourceVersion": "5"}}

    store.replace_all([job("a", "x"), job("b", "y")], "5")
    store.replace_all([job("a", "z")], "6", namespace="a")  # a's list: x is gone from a, b untouched
    assert sorted(store.values()) == ["y", "z"]


def test_a_list_slimmed_page_by_page_is_not_slimmed_again_but_a_watch_event_is() -> None:
    calls: list[str] = []

    def counting_slim(body: dict[str, Any]) -> dict[str, Any]:
        calls.append(str(body["metadata"]["name"]))
        return slim_node(body)

    config = OperatorConfig().topology
    store: ObjectStore[Any] = ObjectStore(lambda body: parse_node(body, config), slim=counting_slim)
    pages = [store.slim(kwok_node(i)) for i in range(3)]  # what the reflector hands over
    calls.clear()
    store.replace_all(pages, "20", slimmed=True)
    assert calls == [] and len(store) == 3
    event = kwok_node(3)
    store.upsert(event)
    assert calls == [event["metadata"]["name"]], "a watch event's body is slimmed by the store"
    assert "managedFields" not in store.body("", event["metadata"]["name"])["metadata"]  # type: ignore[index]


def test_lists_come_in_pages_each_slimmed_before_the_next_and_an_expired_token_restarts_the_list() -> None:
    nodes = [kwok_node(i % 4) | {"metadata": {"name": f"n{i}", "managedFields": MANAGED}} for i in range(7)]
    requests: list[dict[str, str]] = []
    expired = [True]

    async def list_nodes(request: web.Request) -> web.Response:
        query = dict(request.query)
        requests.append(query)
        limit = int(query["limit"])
        start = int(query.get("continue", "0"))
        if start and expired[0]:
            expired[0] = False  # the first continue token has expired (compaction): 410 once
            return web.json_response({"kind": "Status", "code": 410, "message": "expired"}, status=410)
        page = nodes[start : start + limit]
        more = start + limit < len(nodes)
        metadata = {"resourceVersion": "99", **({"continue": str(start + limit)} if more else {})}
        return web.json_response({"kind": "NodeList", "apiVersion": "v1", "metadata": metadata, "items": page})

    async def scenario() -> None:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", list_nodes)
        runner, kube = await serve(app)
        slimmed: list[str] = []

        def transform(item: dict[str, Any]) -> dict[str, Any]:
            slimmed.append(item["metadata"]["name"])
            return without_managed_fields(item)

        try:
            items, version = await kube.list("/api/v1/nodes", transform=transform, page_size=3)
        finally:
            await kube.close()
            await runner.cleanup()
        assert version == "99"
        assert [i["metadata"]["name"] for i in items] == [f"n{i}" for i in range(7)]
        assert all("managedFields" not in i["metadata"] and i["kind"] == "Node" for i in items)
        # page 1, the expired token, then the whole list again in pages of 3
        assert [r.get("continue") for r in requests] == [None, "3", None, "3", "6"]
        assert all(r["limit"] == "3" for r in requests)
        assert slimmed[:3] == ["n0", "n1", "n2"] and len(slimmed) == 3 + 7

    asyncio.run(scenario())


class ScriptedKube:
    """Lists from a script (a list of results or errors); watches end at once."""

    def __init__(self, lists: list[Any], list_seconds: float = 0.0) -> None:
        self.lists = lists
        self.list_seconds = list_seconds  # how long each list takes
        self.listed = 0
        self.watches: list[int] = []

    async def list(self, path: str, transform: Any = None) -> tuple[list[dict[str, Any]], str]:
        await asyncio.sleep(self.list_seconds)
        result = self.lists[min(self.listed, len(self.lists) - 1)]
        self.listed += 1
        if isinstance(result, ApiError):
            raise result
        return list(result), str(self.listed)

    async def watch(self, path: str, version: str | None, timeout_s: int = 300) -> AsyncIterator[dict[str, Any]]:
        self.watches.append(timeout_s)
        await asyncio.sleep(0.01)
        for event in ():
            yield event


def test_an_optional_kind_the_api_does_not_serve_counts_as_listed_and_empty() -> None:
    kube = ScriptedKube([ApiError(404, "the server could not find the requested resource")])
    lists: list[tuple[list[dict[str, Any]], str | None]] = []
    timed: list[float] = []
    receiver = Receiver(lambda i, v: lists.append((i, v)), lambda k, b: None, on_listed=lambda name, s: timed.append(s))
    reflector = Reflector(cast(Any, kube), Watched("/apis/x/v1/queues", optional=True), receiver)

    async def scenario() -> None:
        task = asyncio.create_task(reflector.run())
        await asyncio.wait_for(reflector.synced.wait(), 30)
        task.cancel()

    asyncio.run(scenario())
    assert lists == [([], None)] and reflector.absent
    assert timed == [], "a 404 is not a list: paralleljob_list_duration_seconds counts only real ones"


def test_a_required_kind_that_cannot_be_listed_is_retried_and_never_synced() -> None:
    kube = ScriptedKube([ApiError(403, "forbidden")])
    reflector = Reflector(cast(Any, kube), Watched("/api/v1/nodes"), Receiver(lambda i, v: None, lambda k, b: None))

    async def scenario() -> None:
        task = asyncio.create_task(reflector.run())
        await asyncio.sleep(0.5)
        task.cancel()

    asyncio.run(scenario())
    assert not reflector.synced.is_set() and kube.listed >= 3


def test_each_kind_is_listed_again_every_relist_period() -> None:
    kube = ScriptedKube([[{"metadata": {"name": "a"}}]])
    lists: list[str | None] = []
    timed: list[str] = []
    receiver = Receiver(lambda i, v: lists.append(v), lambda k, b: None, on_listed=lambda name, s: timed.append(name))
    reflector = Reflector(cast(Any, kube), Watched("/api/v1/nodes", relist_seconds=0.1), receiver)

    async def scenario() -> None:
        task = asyncio.create_task(reflector.run())
        await asyncio.sleep(0.45)
        task.cancel()

    asyncio.run(scenario())
    assert 3 <= len(lists) <= 6, lists
    assert timed == ["/api/v1/nodes"] * len(lists), "each list's time is reported"
    assert all(timeout <= 2 for timeout in kube.watches)  # each watch ends by the next re-list


def test_a_kind_whose_list_takes_long_is_listed_again_only_many_list_lengths_later() -> None:
    # At 50,000 ParallelJobs a list took 67 s under load; re-listing every 300 s would spend a fifth of the
    # time (and the API server's) on the safety net.
    kube = ScriptedKube([[{"metadata": {"name": "a"}}]], list_seconds=0.05)
    receiver = Receiver(lambda i, v: None, lambda k, b: None)
    reflector = Reflector(cast(Any, kube), Watched("/api/v1/nodes", relist_seconds=0.01), receiver)

    async def scenario() -> None:
        task = asyncio.create_task(reflector.run())
        await asyncio.sleep(0.8)
        task.cancel()

    asyncio.run(scenario())
    assert kube.listed == 1, f"listed {kube.listed} times in 0.8 s"
    assert reflector.relist_after >= RELIST_COST_FACTOR * 0.05


def test_a_status_report_that_changes_nothing_kept_is_not_parsed_again_but_its_version_is_kept() -> None:
    topology = OperatorConfig().topology
    parsed: list[str] = []

    def parse(body: Any) -> Any:
        parsed.append(body["metadata"]["resourceVersion"])
        return parse_node(body, topology)

    store: ObjectStore[Any] = ObjectStore(parse, slim=slim_node)
    first = kwok_node(0)
    assert store.upsert(first)
    beat = copy.deepcopy(first)
    beat["metadata"]["resourceVersion"] = "50"
    for condition in beat["status"]["conditions"]:
        condition["lastHeartbeatTime"] = "2026-11-23T19:39:05Z"
    assert not store.upsert(beat)  # nothing the operator reads changed
    kept = store.body("", "gpu-node-000")
    assert kept is not None and kept["metadata"]["resourceVersion"] == "50"
    assert not store.upsert(first)  # the older version is refused: the newer one was recorded
    cordoned = copy.deepcopy(beat)
    cordoned["metadata"]["resourceVersion"] = "51"
    cordoned["spec"] = {"unschedulable": True}
    assert store.upsert(cordoned)
    assert parsed == ["10", "51"]
    node = store.get("", "gpu-node-000")
    assert node is not None and node.cordoned


class FloodKube:
    """One ParallelJob list as a flood's was: while its pages come (slowly), the job on them finishes (its
    status write's response lands in the store) and its TTL deletes it, longer ago than a tombstone lives."""

    def __init__(self, reconciler: Any, running: dict[str, Any], wait_s: float) -> None:
        self.reconciler, self.running, self.wait_s = reconciler, running, wait_s

    async def list(self, path: str, transform: Any = None) -> tuple[list[dict[str, Any]], str]:
        jobs, meta = self.reconciler.jobs, self.running["metadata"]
        finished = copy.deepcopy(self.running)
        finished["metadata"]["resourceVersion"] = "12"
        finished["status"]["phase"] = "Succeeded"
        jobs.upsert(finished)  # written after the list's snapshot (rv 11)
        page = [transform(copy.deepcopy(self.running))]  # the snapshot's version: Running, with its placement
        jobs.forget(meta["namespace"], meta["name"], meta["uid"])  # its TTL delete, confirmed
        await asyncio.sleep(self.wait_s)  # the remaining pages
        other = copy.deepcopy(self.running)
        other["metadata"].update(name="other", uid="u-other", resourceVersion="11")
        jobs.upsert(other)  # any write compacts the tombstones
        return [*page, transform(copy.deepcopy(other))], "11"

    async def watch(self, path: str, version: str | None, timeout_s: int = 300) -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(3600)
        for event in ():
            yield event


def test_a_job_deleted_while_the_operator_lists_jobs_is_not_brought_back_by_the_list() -> None:
    """The operator's own wiring (runner's reflector over the reconciler's job store): a tombstone laid during
    a list outlives it, so a 50,000-job list that took minutes no longer revived finished, deleted jobs with
    the placements they held when it began (newer jobs held those GPUs by then and lost them)."""
    from paralleljob.k8s.plan.decide import holds_gpus
    from paralleljob.k8s.runtime.observe.metrics import Metrics
    from paralleljob.k8s.runtime.reconciler import Reconciler
    from paralleljob.k8s.runtime.runner import _reflector
    from tests.k8s.factories import node, paralleljob
    from tests.k8s.harness import FakeCluster

    fc = FakeCluster([node("gpu-node-0")])
    fc.add_job(paralleljob("llm", 2, 1, 2))
    fc.settle(4)
    running = json.loads(json.dumps(next(iter(fc.jobs.values()))))  # as decoded from the wire
    running["metadata"].update(uid="u-llm", resourceVersion="10")
    assert running["status"]["phase"] == "Running" and running["status"]["placement"]
    reconciler = Reconciler(cast(Any, object()), OperatorConfig(), Metrics())
    reconciler.on_event("job", "ADDED", running)
    job = reconciler.jobs.get("ns", "llm")
    assert job is not None and not job.invalid and holds_gpus(job)
    reconciler.jobs._ttl = 0.05  # a tombstone's 300 s, shrunk with the list's minutes to a test's time
    kube = FloodKube(reconciler, running, wait_s=0.2)
    reflector = _reflector(cast(Any, kube), reconciler, "job", Watched("/apis/paralleljob.dev/v1alpha1/paralleljobs"))

    async def scenario() -> None:
        task = asyncio.create_task(reflector.run())
        await asyncio.wait_for(reflector.synced.wait(), 5)
        task.cancel()

    asyncio.run(scenario())
    assert reconciler.jobs.get("ns", "llm") is None, "the deleted job came back from the list's page"
    assert reconciler.jobs.get("ns", "other") is not None

"""The web view's way in and way out: list-and-watch of nodes, pods, ParallelJobs, queues and Warning
Events into stores (the operator's own ``Reflector`` and ``ObjectStore``: paging, slimming, resume after a
disconnect, re-list on 410, newest-wins), and a picture rebuilt after changes and handed to every browser
as a patch.

On a DRA cluster a node's GPUs are in its ResourceSlice, not its allocatable: the feed also watches
ResourceSlices, ResourceClaims and DeviceTaintRules and reads nodes through the operator's own overlay of
them (``k8s/view/dranodes.OverlaidNodes``, wired as the reconciler wires it), so the map shows what the
scheduler sees; without them every DRA node would have no GPUs and only ghosts of recorded nodes would show.

Nothing is polled: a rebuild runs only when a watch delivered a change, at most one at a time, and changes
that arrive while one runs are folded into the next (so a burst costs one rebuild, and a browser is never
more than one rebuild behind the last event). The picture is built in a worker thread so the event loop
keeps serving streams meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from paralleljob.clitools.gpumap import node_row, pool_rows
from paralleljob.core.topology import Topology
from paralleljob.dashboard.model import FEED_LENGTH, Listed, PackedRows, RowTally, assemble, pack_job, pack_node, patch
from paralleljob.k8s.edge.config import DraConfig, TopologyConfig
from paralleljob.k8s.edge.constants import GROUP, PLURAL, QUEUE_PLURAL, VERSION
from paralleljob.k8s.edge.parse.dra import CLAIMS_PATH, SLICES_PATH, ClaimInfo, SliceInfo, parse_claim, parse_slice
from paralleljob.k8s.edge.parse.nodes import NodeInfo, parse_node
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.edge.parse.slim import slim_node, without_managed_fields
from paralleljob.k8s.edge.parse.specs import JobObject, parse_job
from paralleljob.k8s.edge.parse.taintrules import TAINT_RULES_PATH, TaintRuleInfo, parse_taint_rule
from paralleljob.k8s.plan.decide import claims_of
from paralleljob.k8s.runtime.api import Kube
from paralleljob.k8s.runtime.reflector import Receiver, Reflector, Watched
from paralleljob.k8s.view.clusterview import ClusterView
from paralleljob.k8s.view.dranodes import OverlaidNodes
from paralleljob.k8s.view.liveview import LiveView, NodeSource
from paralleljob.k8s.view.store import ObjectStore

log = logging.getLogger("paralleljob.dashboard")

Body = Mapping[str, Any]
KEEP_STREAMS_BEHIND = 64  # messages a slow browser may lag before it is sent the whole picture again


def _identity(body: Body) -> Body:
    return body


class Feed:
    """Stores, their reflectors, the latest picture and the browsers' message queues."""

    def __init__(self, kube: Kube, config: TopologyConfig | None = None, dra: DraConfig | None = None) -> None:
        self.kube = kube
        self.config = config or TopologyConfig()
        self.dra = dra if dra is not None else DraConfig()
        lean = without_managed_fields
        self.nodes: ObjectStore[NodeInfo] = ObjectStore(lambda body: parse_node(body, self.config), slim=slim_node)
        self.pods: ObjectStore[PodInfo] = ObjectStore(parse_pod, slim=lean)
        self.jobs: ObjectStore[JobObject] = ObjectStore(parse_job, slim=lean)
        self.queues: ObjectStore[Body] = ObjectStore(_identity, slim=lean)
        self.slices: ObjectStore[SliceInfo] = ObjectStore(parse_slice, slim=lean)
        self.claims: ObjectStore[ClaimInfo] = ObjectStore(parse_claim, slim=lean)
        self.rules: ObjectStore[TaintRuleInfo] = ObjectStore(parse_taint_rule, slim=lean)
        self.stores: dict[str, ObjectStore[Any]] = {
            "nodes": self.nodes, "pods": self.pods, "jobs": self.jobs, "queues": self.queues,
            "slices": self.slices, "claims": self.claims, "rules": self.rules,
        }
        # The operator's incremental cluster view (it alone drains the node and pod stores' change lists),
        # and the packed rows kept between pictures: only the nodes an event touched are packed again.
        # With DRA on, nodes are read through the operator's overlay of them, as its reconciler reads them.
        source: NodeSource = self.nodes
        if self.dra.enabled:
            source = OverlaidNodes(
                self.nodes, self.slices, self.claims, self.dra, self.config.default_gpu_memory_gib, self.rules
            )
        self.live = LiveView(self.config, _Noting(source, self._view_changed), self.pods)
        self.rows: dict[str, dict[str, Any]] = {}
        self.tally = RowTally()  # the rows' GPUs by state and holder, kept as rows change
        self.changed_rows: set[str] | None = None  # rows the last build re-packed differently (None: all anew)
        self._rows_of: Topology | None = None  # the topology whose nodes ``rows`` holds
        self.domain_ids: dict[str, int] = {}
        self.holder_ids: dict[str, int] = {}
        self.dirty: set[str] = set()
        self.job_nodes: dict[str, set[str]] = {}  # job key -> nodes of its recorded placement
        self._packed: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.failures: deque[Body] = deque(maxlen=FEED_LENGTH)
        self.current: dict[str, Any] | None = None
        self.view: ClusterView | None = None
        self.seq = 0
        self.changed_at: float | None = None  # monotonic time of the oldest change not yet in a picture
        self.built_in_s = 0.0  # how long the latest rebuild took (for /healthz and the benchmark)
        self._dirty = asyncio.Event()
        self._streams: set[asyncio.Queue[str | None]] = set()
        self.synced = asyncio.Event()

    # ---- way in ----------------------------------------------------------------------------------------
    def reflectors(self, rules_path: str = TAINT_RULES_PATH) -> list[Reflector]:
        """One watch per kind shown; ``rules_path``: the DeviceTaintRules of the version the server serves."""
        paths = {
            "nodes": ("/api/v1/nodes", False),
            "pods": ("/api/v1/pods", False),
            "jobs": (f"/apis/{GROUP}/{VERSION}/{PLURAL}", False),
            "queues": (f"/apis/{GROUP}/{VERSION}/{QUEUE_PLURAL}", True),
        }
        if self.dra.enabled:  # optional: a cluster before resource.k8s.io/v1, or a role without the verbs
            paths |= {"slices": (SLICES_PATH, True), "claims": (CLAIMS_PATH, True), "rules": (rules_path, True)}
        out = [
            Reflector(
                self.kube,
                Watched(path, name=kind, optional=optional),
                Receiver(self._on_list(kind), self._on_event(kind), transform=self.stores[kind].slim),
            )
            for kind, (path, optional) in paths.items()
        ]
        out.append(
            Reflector(
                self.kube,
                Watched("/api/v1/events", name="events", query={"fieldSelector": "type=Warning"}, optional=True),
                Receiver(
                    lambda items, _: self._failures(items, reset=True),
                    lambda kind, body: self._failures([body]) if kind != "DELETED" else None,
                    transform=without_managed_fields,
                ),
            )
        )
        return out

    def _on_list(self, kind: str) -> Callable[[list[dict[str, Any]], str | None], None]:
        def on_list(items: list[dict[str, Any]], version: str | None) -> None:
            self.stores[kind].replace_all(items, version, slimmed=True)
            self._touch()

        return on_list

    def _on_event(self, kind: str) -> Callable[[str, Body], None]:
        def on_event(event: str, body: Body) -> None:
            store = self.stores[kind]
            changed = store.remove(body) if event == "DELETED" else store.upsert(store.slim(body), slimmed=True)
            if changed:
                self.dirty |= touched_nodes(kind, body, self.job_nodes)
                self._touch()

        return on_event

    def _failures(self, events: list[dict[str, Any]] | list[Body], reset: bool = False) -> None:
        if reset:
            self.failures.clear()
        stamp = lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")  # noqa: E731
        uids = {str((e.get("metadata") or {}).get("uid")): e for e in self.failures}
        for event in sorted(events, key=stamp):
            uids.pop(str((event.get("metadata") or {}).get("uid")), None)
            uids[str((event.get("metadata") or {}).get("uid"))] = event
        self.failures = deque(sorted(uids.values(), key=stamp)[-FEED_LENGTH:], maxlen=FEED_LENGTH)
        self._touch()

    def _view_changed(self, names: list[tuple[str, str]]) -> None:
        """Nodes whose value the view took in changed: on a DRA node a slice, claim or rule changes it too."""
        self.dirty |= {name for _, name in names}

    def _touch(self) -> None:
        if self.changed_at is None:
            self.changed_at = time.monotonic()
        self._dirty.set()

    # ---- the picture ---------------------------------------------------------------------------------
    def build(self) -> tuple[dict[str, Any], ClusterView]:
        """The picture now: the kept view patched (``LiveView``), the rows of the nodes touched since the
        last picture packed again, or all of them after the view was rebuilt."""
        jobs = self.jobs.values()
        rebuilds = sum(self.live.rebuilds.values())
        view = self.live.refresh(claims_of(jobs))
        topology = view.topology
        names = topology.node_names
        dirty, self.dirty = self.dirty, set()
        # the rows are those of one topology object (a new one comes only with a rebuild of the view)
        fresh = sum(self.live.rebuilds.values()) != rebuilds or topology is not self._rows_of
        if fresh or len(self.rows) != len(names):
            self.rows, self.domain_ids, self.holder_ids = {}, {}, {}  # numbered afresh with every row
            self._rows_of = topology
            self.tally, self.changed_rows = RowTally(), None
            dirty = set(names)
        else:
            self.changed_rows = set()
        for name in dirty:
            index = view.node_index.get(name)
            if index is None:
                continue
            row = node_row(view, index, self.nodes.body("", name))
            domain = self.domain_ids.setdefault(row.domain, len(self.domain_ids))
            for cell in row.gpus:
                if cell.holder is not None:
                    self.holder_ids.setdefault(cell.holder, len(self.holder_ids))
            packed = pack_node(row, domain, self.holder_ids)
            old = self.rows.get(name)
            if old != packed:
                if old is not None:
                    self.tally.add(old, -1)
                self.tally.add(packed)
                if self.changed_rows is not None:
                    self.changed_rows.add(name)
            self.rows[name] = packed
        level = topology.levels[1].name  # "cluster" for a cluster without GPU nodes
        bodies = [body for key, _ in self.jobs.items() if (body := self.jobs.body(*key)) is not None]
        self.job_nodes = {job.key: set(job.record.nodes) if job.record else set() for job in jobs}
        self._packed = {k: v for k, v in self._packed.items() if k[0] in self._job_uids()}
        warnings = (*view.warnings, *(f"{k}: {v}" for k, v in view.conflicts.items()))
        queues = [b for k, _ in self.queues.items() if (b := self.queues.body(*k)) is not None]
        listed = Listed(bodies, queues, self.failures, warnings, pool_rows(view, self.live.pods.values()))
        new = assemble(level, PackedRows(self.rows, list(self.domain_ids), list(self.holder_ids)), listed,
                       pack=self._pack_job, tally=self.tally)
        return new, view

    def _pack_job(self, body: Body, colour: int) -> dict[str, Any]:
        """``pack_job``, once per version of a job and colour (80 jobs with their records cost 60 ms a picture)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")), colour)
        packed = self._packed.get(key)
        if packed is None:
            packed = self._packed[key] = pack_job(body, colour)
        return packed

    def _job_uids(self) -> set[str]:
        bodies = (self.jobs.body(*key) for key, _ in self.jobs.items())
        return {str((b.get("metadata") or {}).get("uid", "")) for b in bodies if b is not None}

    async def run(self, reflectors: list[Reflector]) -> None:
        """Rebuild after every burst of changes, once every store has been listed."""
        await asyncio.gather(*(r.synced.wait() for r in reflectors))
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            since, self.changed_at = self.changed_at, None
            started = time.monotonic()
            # On the event loop, not in a thread: the watches write the stores from the loop, and the view
            # must read them whole (tens of milliseconds at 12,500 nodes; a full rebuild, seconds, is rare).
            new, view = self.build()
            self.built_in_s = time.monotonic() - started
            self._publish(new, view, time.monotonic() - (since or started))
            self.synced.set()
            await asyncio.sleep(0)  # let the streams write before the next burst is folded in

    def _publish(self, new: dict[str, Any], view: ClusterView, lag_s: float = 0.0) -> None:
        old, self.current, self.view = self.current, new, view
        change = patch(old, new, self.changed_rows) if old is not None else None
        if old is not None and change is None:
            return
        self.seq += 1
        # serverMs: from the first change the watches delivered to this patch (what the browser adds is its own)
        message = (
            _sse("patch", {"seq": self.seq, "serverMs": round(lag_s * 1000, 1), **(change or {})})
            if old is not None
            else self.snapshot_message()
        )
        for stream in list(self._streams):
            if stream.qsize() >= KEEP_STREAMS_BEHIND:  # a stalled browser: start it over rather than queue more
                while not stream.empty():
                    stream.get_nowait()
                stream.put_nowait(self.snapshot_message())
            else:
                stream.put_nowait(message)

    def snapshot_message(self) -> str:
        return _sse("snapshot", {"seq": self.seq, **(self.current or {})})

    # ---- way out -------------------------------------------------------------------------------------
    def subscribe(self) -> asyncio.Queue[str | None]:
        stream: asyncio.Queue[str | None] = asyncio.Queue()
        if self.current is not None:
            stream.put_nowait(self.snapshot_message())
        self._streams.add(stream)
        return stream

    def unsubscribe(self, stream: asyncio.Queue[str | None]) -> None:
        self._streams.discard(stream)

    def close(self) -> None:
        for stream in self._streams:
            stream.put_nowait(None)


class _Noting:
    """The view's node source, telling the feed which nodes the view saw change (``NodeSource``)."""

    def __init__(self, source: NodeSource, note: Callable[[list[tuple[str, str]]], None]) -> None:
        self.source, self.note = source, note

    def values(self) -> list[NodeInfo]:
        return self.source.values()

    def get(self, namespace: str, name: str) -> NodeInfo | None:
        return self.source.get(namespace, name)

    def take_changes(self) -> tuple[list[tuple[str, str]], bool]:
        keys, relisted = self.source.take_changes()
        self.note(keys)
        return keys, relisted


def _sse(event: str, data: Mapping[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def touched_nodes(kind: str, body: Body, job_nodes: Mapping[str, set[str]]) -> set[str]:
    """The nodes whose row a change of this object may change: a node itself, a pod's node, and for a job the
    nodes of its placement before and after (its claim holds their GPUs)."""
    meta = body.get("metadata") or {}
    if kind == "nodes":
        return {str(meta.get("name", ""))}
    if kind == "pods":
        node = (body.get("spec") or {}).get("nodeName")
        return {str(node)} if node else set()
    if kind == "jobs":
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        placed = ((body.get("status") or {}).get("placement") or {}).get("pods") or []
        return set(job_nodes.get(key, ())) | {str(p.get("node")) for p in placed if isinstance(p, Mapping)}
    return set()

"""What the web view shows, as JSON-ready values (pure): the GPU map of ``paralleljob status`` packed small
enough to send 100k GPUs to a browser, each job's rank layout, the queues and the failures feed; and the
patch that turns one such picture into the next.

The map itself is the CLI's (``clitools.gpumap.build_map``: the operator's own parsers and cluster view),
so the browser, the terminal and the scheduler agree on every GPU. Packing: a node is its name, its domain
(an index into ``domains``, the whole topology path of its rack), a string with one letter per GPU state and
a list with the holder of each GPU (an index into ``holders``, -1 for none). Jobs hold their colour index
(``job_order``, shared with the terminal map's letters) and, once placed, their slots: the GPUs of one TP
group on one pod, with its replica (DP), stage (PP), group (d x pp + p), pod, node, GPU indices and global
ranks. A TP-group pod is one slot; a whole-tray pod (NVL72 trays) holds consecutive global ranks, part of a
TP group or several whole ones, so it is cut into one slot per TP group its ranks belong to, each rank
mapped back to its (replica, stage) by the job's rank order (``core.rankorder.coordinates``). Each job also
has a brief of its moves that free room (``moveplans.moves_of``, the parse ``describe`` shows).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from paralleljob.clitools.gpumap import (
    CLOSED,
    DEGRADED,
    DRAINED,
    FREE,
    UNHEALTHY,
    USED,
    GpuMap,
    NodeRow,
    PoolRow,
    number_jobs,
    sharing_kind,
)
from paralleljob.core.rankorder import coordinates
from paralleljob.k8s.edge.parse.queues import parse_queue
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.jobstatus import JobStatus
from paralleljob.k8s.edge.status.moveplans import moves_of
from paralleljob.k8s.edge.status.records import PlacementRecord

STATE_LETTERS = {FREE: "f", USED: "u", CLOSED: "c", DEGRADED: "g", DRAINED: "d", UNHEALTHY: "x"}
PLACED_PHASES = ("Placing", "Running", "Recovering")
WAITING_PHASES = ("Pending", "Queued", "Preempted")
FEED_LENGTH = 200  # failures kept for the feed, newest last


def pack_node(row: NodeRow, domain: int, holder_index: Mapping[str, int]) -> dict[str, Any]:
    notes = [f"{c.index}: {c.reason}" for c in row.gpus if c.state in (UNHEALTHY, DEGRADED, DRAINED) and c.reason]
    notes += [f"{c.index}: {sharing_kind(c)} {', '.join(c.slices)}" for c in row.gpus if c.slices]  # who shares it
    return {
        "name": row.name,
        "domain": domain,
        "ready": row.ready,
        "schedulable": row.schedulable,
        "why": "" if row.schedulable else row.why_closed,
        "gpuHealthy": row.condition,
        "states": "".join(STATE_LETTERS[c.state] for c in row.gpus),
        "holders": [holder_index.get(c.holder, -1) if c.holder else -1 for c in row.gpus],
        "notes": notes[:8],
    }


def _waiting_reason(status: JobStatus) -> str:
    for condition in status.conditions:  # as the edge parsed them
        if condition.get("status") == "False" and condition.get("message"):
            return f"{condition.get('reason', '')}: {condition['message']}"
    return str(status.raw.get("message") or "")


def pack_slots(record: PlacementRecord) -> list[dict[str, Any]]:
    """The record's pods cut where the TP group changes, in pod order (node rank for trays)."""
    tp, pp, dp, order = record.tp, record.pp, record.dp, record.rank_order
    out: list[dict[str, Any]] = []
    for pod in record.to_status()["pods"]:
        slot: dict[str, Any] | None = None
        if not pod["gpuIndices"]:  # a MIG slice the device plugin placed: the node is known, not the GPU
            out.append({"pod": pod["name"], "node": pod["node"], "nodeRank": pod["nodeRank"], "replica": pod["replica"],
                        "stage": pod["stage"], "group": pod["replica"] * pp + pod["stage"], "gpuIndices": [],
                        "ranks": pod["ranks"], "migSlice": pod.get("migSlice")})  # fmt: skip
            continue
        for index, rank in zip(pod["gpuIndices"], pod["ranks"], strict=True):
            replica, stage, _ = coordinates(order, rank, tp, pp, dp)
            if slot is None or (slot["replica"], slot["stage"]) != (replica, stage):
                slot = {"pod": pod["name"], "node": pod["node"], "nodeRank": pod["nodeRank"], "replica": replica,
                        "stage": stage, "group": replica * pp + stage, "gpuIndices": [], "ranks": []}
                out.append(slot)
            slot["gpuIndices"].append(index)
            slot["ranks"].append(rank)
    return out


def pack_job(body: Mapping[str, Any], colour: int) -> dict[str, Any]:
    job = parse_job(body)
    request, record, status = job.request, job.record, job.status.raw
    shape = (record.tp, record.pp, record.dp) if record else (
        (request.spec.tp, request.spec.pp, request.spec.dp) if request else (0, 0, 0)
    )
    return {
        "key": job.key,
        "colour": colour,
        "phase": job.phase.value,
        "queue": request.queue if request else "",
        "priority": request.priority if request else 0,
        "shape": {"tp": shape[0], "pp": shape[1], "dp": shape[2]},
        "gpus": shape[0] * shape[1] * shape[2],
        "cost": dict(status.get("communicationCost") or {}),
        "restarts": job.restarts,
        "why": "" if job.phase.value in PLACED_PHASES else (job.invalid or _waiting_reason(job.status)),
        "slots": pack_slots(record) if record else [],
        "moves": moves_of(status).brief(),  # its plan to free room, or its last move for one (describe's parse)
    }


def pack_queues(queues: Iterable[Mapping[str, Any]], jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per queue: what it holds (GPUs of its placed jobs), what it is guaranteed, and who waits and why."""
    out: dict[str, dict[str, Any]] = {}
    for body in queues:
        info = parse_queue(body)
        out[info.name] = {"name": info.name, "guaranteed": info.guaranteed_gpus, "max": info.max_gpus,
                          "weight": info.weight, "holding": 0, "running": 0, "waiting": []}
    for job in jobs:
        queue = out.setdefault(job["queue"] or "default", {"name": job["queue"] or "default", "guaranteed": 0,
                                                           "max": None, "weight": 1.0, "holding": 0,
                                                           "running": 0, "waiting": []})
        if job["phase"] in PLACED_PHASES:
            queue["holding"] += job["gpus"]
            queue["running"] += 1
        elif job["phase"] in WAITING_PHASES:
            queue["waiting"].append({"key": job["key"], "gpus": job["gpus"], "why": job["why"]})
    return sorted(out.values(), key=lambda q: str(q["name"]))


def failure_line(event: Mapping[str, Any]) -> dict[str, Any]:
    """A Warning Event as a line of the failures feed."""
    meta, involved = event.get("metadata") or {}, event.get("involvedObject") or {}
    when = event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp") or ""
    ns = involved.get("namespace")
    return {
        "uid": str(meta.get("uid", "")),
        "time": str(when),
        "object": f"{involved.get('kind', '')} {ns + '/' if ns else ''}{involved.get('name', '')}",
        "reason": str(event.get("reason", "")),
        "message": str(event.get("message", ""))[:300],
        "count": int(event.get("count") or 1),
    }


def picture(
    gpu_map: GpuMap,
    jobs: Iterable[Mapping[str, Any]],
    queues: Iterable[Mapping[str, Any]] = (),
    failures: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The whole view from a whole map: what a browser gets first, and what each patch is computed against.
    (The web view's feed keeps the packed rows and redoes only changed nodes; ``assemble`` is shared.)"""
    domains: dict[str, int] = {}
    holders = {h: i for i, h in enumerate(sorted({c.holder for r in gpu_map.nodes for c in r.gpus if c.holder}))}
    rows = {row.name: pack_node(row, domains.setdefault(row.domain, len(domains)), holders) for row in gpu_map.nodes}
    listed = Listed(jobs, queues, failures, gpu_map.warnings, gpu_map.pools)
    return assemble(gpu_map.domain_level, PackedRows(rows, list(domains), list(holders)), listed)


@dataclass(frozen=True)
class PackedRows:
    """The GPU rows as the browser gets them: each node's packed row, and the names its indices stand for."""

    rows: Mapping[str, dict[str, Any]]
    domains: list[str]
    holders: list[str]  # holders[i] is the key a row's holder index i names


@dataclass(frozen=True)
class Listed:
    """What the picture lists beside the GPU rows: job and queue bodies, failure Events, warnings."""

    jobs: Iterable[Mapping[str, Any]]
    queues: Iterable[Mapping[str, Any]]
    failures: Iterable[Mapping[str, Any]]
    warnings: Iterable[str]
    pools: Iterable[PoolRow] = ()  # device-plugin MIG nodes (``gpumap.pool_rows``)


def assemble(
    level: str,
    packed: PackedRows,
    listed: Listed,
    pack: Callable[[Mapping[str, Any], int], dict[str, Any]] = pack_job,
    tally: RowTally | None = None,
) -> dict[str, Any]:
    """The picture from packed rows and what it lists; ``pack`` is ``pack_job`` or a memo of it; ``tally``: the
    rows' GPU states and holders counted as they changed (the feed's), instead of counted here over every row."""
    rows, domains, holders = packed.rows, packed.domains, packed.holders
    if tally is None:
        tally = RowTally()
        for row in rows.values():
            tally.add(row)
    in_use = {i for i, n in tally.holders.items() if n > 0 and i >= 0}
    colours = number_jobs(holders[i] for i in in_use)
    packed_jobs = sorted((pack(body, colours.get(_key(body), -1)) for body in listed.jobs), key=lambda j: str(j["key"]))
    counts = tally.states
    totals = {state: counts.get(letter, 0) for state, letter in STATE_LETTERS.items()}
    totals["total"] = sum(totals.values())
    return {
        "level": level,
        "domains": domains,
        "holders": [{"key": h, "colour": colours.get(h, -1)} for h in holders],
        "nodes": dict(rows),
        "jobs": packed_jobs,
        "queues": pack_queues(listed.queues, packed_jobs),
        "failures": [failure_line(e) for e in listed.failures][-FEED_LENGTH:],
        "totals": totals,
        "warnings": list(listed.warnings),
        "migPools": [asdict(row) for row in listed.pools],
    }


class RowTally:
    """GPUs by state letter and by holder index over a set of packed rows, kept as rows come and go, so a
    picture of 12,500 nodes is not counted GPU by GPU after every event."""

    def __init__(self) -> None:
        self.states: Counter[str] = Counter()
        self.holders: Counter[int] = Counter()

    def add(self, row: Mapping[str, Any], sign: int = 1) -> None:
        for letter in row["states"]:
            self.states[letter] += sign
        for holder in row["holders"]:
            self.holders[holder] += sign


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def patch(
    old: Mapping[str, Any], new: Mapping[str, Any], changed_nodes: Iterable[str] | None = None
) -> dict[str, Any] | None:
    """What turns ``old`` into ``new``: the nodes that changed or went, and every small part whole (jobs,
    queues, failures, holders, domains are a few kB even at 12,500 nodes); None when nothing changed.
    ``changed_nodes``: the only rows that may differ (the same nodes in both), when the caller knows them;
    else every row is compared."""
    old_nodes, new_nodes = old["nodes"], new["nodes"]
    if changed_nodes is not None:
        candidates = [n for n in changed_nodes if n in new_nodes]
        changed = {n: new_nodes[n] for n in candidates if old_nodes.get(n) != new_nodes[n]}
        gone: list[str] = []
    else:
        changed = {name: row for name, row in new_nodes.items() if old_nodes.get(name) != row}
        gone = [name for name in old_nodes if name not in new_nodes]
    rest = {k: v for k, v in new.items() if k != "nodes" and old.get(k) != v}
    if not changed and not gone and not rest:
        return None
    return {"nodes": changed, "gone": gone, **rest}

"""``paralleljob describe JOB`` as data (pure): the job's shape and phase, its placement rank by rank, the
communication cost terms, conditions, the last failure and its events, oldest first.

The placement comes from the operator's own record parser (``record_from_status`` through ``parse_job``),
and ranks from :meth:`PlacementRecord.to_status`, the same numbers the pods get in their environment; each
pod's replica(s) and stage(s) from :meth:`PlacementRecord.groups_of` (a whole-tray pod records none: its
ranks say them, through the job's rank order). A pod
whose GPUs come from a ResourceClaim (DRA) also shows the devices its claim's allocation names and their
UUIDs from the ResourceSlices.

A pod group's pods are not named after their slots: each slot shows the pod of its node rank (the one bound
there, or its unbound replacement), and during a repair the old pod still bound on the broken hardware, with
a note that it must go (``podgroups.stuck_pods`` says the same in the job's ``Bound`` condition).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from paralleljob.k8s.edge.parse.dra import parse_claim, parse_slice
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.moveplans import JobMoves, moves_of


@dataclass(frozen=True)
class PodLine:
    name: str
    node: str
    gpu_indices: tuple[int, ...]
    ranks: tuple[int, ...]
    replica: int  # of the pod's first rank (a whole-tray pod may hold ranks of several: ``groups``)
    stage: int
    node_rank: int
    pod_phase: str  # from the Pod object; "" when it does not exist (yet)
    groups: tuple[tuple[int, int], ...] = ()  # (replica, stage) of every TP group the pod holds ranks of
    clique: str = ""  # a whole-tray pod: its NVLink clique (the ComputeDomain it joins)
    devices: tuple[str, ...] = ()  # DRA: the devices allocated in the pod's claims, in their order
    uuids: tuple[str, ...] = ()  # their UUIDs ("" where no slice publishes the device)
    claims: tuple[str, ...] = ()  # DRA: the ResourceClaims whose allocation holds them
    mig: str = ""  # a rank on a MIG slice (spec.gpuSharing): its profile and placement start, "1g.10gb@2" (DRA)
    mps: str = ""  # a rank on an MPS share (spec.gpuSharing.mps): "25%"
    note: str = ""  # a pod group's slot during a repair: the old pod that must go


@dataclass(frozen=True)
class EventLine:
    time: str
    type: str
    reason: str
    message: str
    count: int


@dataclass(frozen=True)
class JobDescription:
    key: str
    phase: str
    shape: str
    gpus: int
    queue: str
    priority: int
    strategy: str
    rank_order: str  # the recorded one once placed (the pods' numbering), else the spec's
    restarts: int
    message: str
    invalid: str
    record_error: str
    epoch: int | None
    cost: dict[str, Any]
    reasons: tuple[str, ...]
    pods: tuple[PodLine, ...]
    conditions: tuple[dict[str, Any], ...]
    last_failure: dict[str, Any]
    events: tuple[EventLine, ...]
    last_drain: dict[str, Any] = field(default_factory=dict)  # a drain's record (not a failure)
    # its plan to free a domain by moving jobs, the last "no plan" or dropped plan, a moved job's last move:
    # parsed once (``moveplans.moves_of``), as the web view reads them
    moves: JobMoves = field(default_factory=JobMoves)
    mig_profile: str = ""  # spec.gpuSharing.migProfile: each rank on one MIG slice of it ("": whole GPUs)
    mps_percent: int = 0  # spec.gpuSharing.mps.percent: each rank an MPS client with this share (0: not MPS)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["moves"] = self.moves.to_json()
        return out


def _event_time(event: Mapping[str, Any]) -> str:
    meta = event.get("metadata") or {}
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or meta.get("creationTimestamp")
        or ""
    )


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod uses: named in its spec, or made from a template (named in its status)."""
    names = [
        str(c["resourceClaimName"])
        for c in (pod.get("spec") or {}).get("resourceClaims") or []
        if c.get("resourceClaimName")
    ]
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    return names + [str(c["resourceClaimName"]) for c in statuses if c.get("resourceClaimName")]


@dataclass(frozen=True)
class PodDevices:
    devices: tuple[str, ...] = ()
    uuids: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()  # the pod's claims that hold at least one of them


def pod_devices(
    pods: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]]
) -> dict[str, PodDevices]:
    """Per pod name: the devices its claims are allocated (names, UUIDs) and those claims."""
    uuids = {(s.pool, d.name): d.uuid for s in map(parse_slice, slices) for d in s.devices}
    allocated = {c.name: c.devices for c in map(parse_claim, claims)}
    out: dict[str, PodDevices] = {}
    for pod in pods:
        held = [name for name in claim_names(pod) if allocated.get(name)]
        devices = [d for name in held for d in allocated[name]]
        if devices:
            name = str((pod.get("metadata") or {}).get("name", ""))
            out[name] = PodDevices(
                tuple(d.device for d in devices),
                tuple(uuids.get((d.pool, d.device), "") for d in devices),
                tuple(dict.fromkeys(held)),
            )
    return out


NONE = PodDevices()


def _group_lines(
    slots: Iterable[Mapping[str, Any]],
    pods: list[PodInfo],
    devices: Mapping[str, PodDevices],
    groups: Mapping[str, tuple[tuple[int, int], ...]],
    finished: Mapping[str, int],
) -> list[PodLine]:
    lines = []
    for item in slots:
        held = groups[item["name"]]
        node, rank = item["node"], item["nodeRank"]
        same = [p for p in pods if p.group_rank == rank and not p.terminal]
        here = [p for p in same if p.node == node] or [p for p in same if not p.bound and not p.deleting]
        elsewhere = [p for p in same if p.bound and p.node != node]
        done = [p for p in pods if p.group_rank == rank and p.phase == "Succeeded" and p.node == node]
        shown = here[0] if here else elsewhere[0] if elsewhere else done[0] if done else None
        note = ""
        if elsewhere:
            old = elsewhere[0]
            note = f"{old.name} still on {old.node}: must go before the replacement is bound here"
            if shown is old:
                note = f"still on {old.node}, not this slot's node: must go; its owner's replacement is bound here"
        phase = ""
        if shown is not None:
            phase = shown.phase or "Pending"
            phase += " (Terminating)" if shown.deleting else ""
        elif finished:
            phase = _finished_phase(finished, item)  # its owner counted it, then the pod GC took it
        name = shown.name if shown is not None else f"(no pod of node rank {rank})"
        lines.append(
            PodLine(
                name=name,
                node=node,
                gpu_indices=tuple(item["gpuIndices"]),
                ranks=tuple(item["ranks"]),
                replica=held[0][0],
                stage=held[0][1],
                node_rank=rank,
                pod_phase=phase,
                groups=held,
                clique=str(item.get("clique", "")),
                devices=devices.get(name, NONE).devices,
                uuids=devices.get(name, NONE).uuids,
                claims=devices.get(name, NONE).claims,
                note=note,
            )
        )
    return sorted(lines, key=lambda line: line.node_rank)


def _finished_phase(finished: Mapping[str, int], item: Mapping[str, Any]) -> str:
    """A slot with no pod whose rank the status says exited 0 (``succeededPods``): its pod was deleted after."""
    return "Succeeded (pod deleted)" if finished.get(item["name"], -1) == item.get("incarnation", 0) else ""


def _mig(data: object) -> str:
    """A record's ``migSlice`` as people read it: ``1g.10gb@2`` (profile at placement start), or the profile
    alone for a slice whose GPU the device plugin picks."""
    if not isinstance(data, Mapping):
        return ""
    start = data.get("start")
    return f"{data.get('profile', '')}" + (f"@{start}" if start is not None else "")


def describe_job(
    body: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]] = (),
    events: Iterable[Mapping[str, Any]] = (),
    claims: Iterable[Mapping[str, Any]] = (),
    slices: Iterable[Mapping[str, Any]] = (),
) -> JobDescription:
    job = parse_job(body)
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    phases = {
        str((p.get("metadata") or {}).get("name", "")): str((p.get("status") or {}).get("phase") or "Pending")
        for p in live
    }
    devices = pod_devices(live, claims, slices)
    lines: list[PodLine] = []
    group = job.request is not None and bool(job.request.pod_group)
    record = job.record
    # a pod's (replica, stage)s from the record, whichever layout: a whole-tray pod's come from its ranks
    groups = {slot.name: record.groups_of(slot) for slot in record.pod_slots} if record is not None else {}
    if record is not None and group:
        pods_seen = [parse_pod(p) for p in pods]
        lines = _group_lines(record.to_status()["pods"], pods_seen, devices, groups, job.status.succeeded_pods)
    elif record is not None:
        for item in record.to_status()["pods"]:
            held = groups[item["name"]]
            lines.append(
                PodLine(
                    name=item["name"],
                    node=item["node"],
                    gpu_indices=tuple(item["gpuIndices"]),
                    ranks=tuple(item["ranks"]),
                    replica=held[0][0],
                    stage=held[0][1],
                    node_rank=item["nodeRank"],
                    pod_phase=phases.get(item["name"]) or _finished_phase(job.status.succeeded_pods, item),
                    groups=held,
                    clique=str(item.get("clique", "")),
                    devices=devices.get(item["name"], NONE).devices,
                    uuids=devices.get(item["name"], NONE).uuids,
                    claims=devices.get(item["name"], NONE).claims,
                    mig=_mig(item.get("migSlice")),
                    mps=f"{item['mpsShare'].get('percent')}%" if isinstance(item.get("mpsShare"), Mapping) else "",
                )
            )
        lines.sort(key=lambda line: line.node_rank)
    request = job.request
    shape, gpus = "", 0
    if request is not None:
        shape, gpus = f"TP{request.spec.tp} x PP{request.spec.pp} x DP{request.spec.dp}", request.spec.num_gpus
    event_lines = sorted(
        (
            EventLine(
                _event_time(e),
                str(e.get("type", "")),
                str(e.get("reason", "")),
                str(e.get("message", "")),
                int(e.get("count") or 1),
            )
            for e in events
        ),
        key=lambda e: e.time,
    )
    status = job.status.raw
    conditions = tuple(dict(c) for c in job.status.conditions)
    return JobDescription(
        key=job.key,
        phase=job.phase.value,
        shape=shape,
        gpus=gpus,
        queue=request.queue if request else "",
        priority=request.priority if request else 0,
        strategy=request.failure.strategy.value if request else "",
        rank_order=(job.record.rank_order if job.record else request.rank_order).value if request else "",
        restarts=job.restarts,
        message=str(status.get("message") or ""),
        invalid=job.invalid,
        record_error=job.record_error,
        epoch=job.record.epoch if job.record else None,
        cost=dict(status.get("communicationCost") or {}),
        reasons=job.record.reasons if job.record else (),
        pods=tuple(lines),
        conditions=conditions,
        last_failure=dict(status.get("lastFailure") or {}),
        events=tuple(event_lines),
        last_drain=dict(status.get("lastDrain") or {}),
        moves=moves_of(status),
        mig_profile=request.mig_profile if request else "",
        mps_percent=request.mps_percent if request else 0,
    )

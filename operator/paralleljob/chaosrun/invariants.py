"""The invariants of a chaos run, judged only from what the API shows (listed Nodes, Pods, ParallelJobs).

Checked on every snapshot:
- ``gpu-twice``: no GPU (node, index) in two live pods (bound, not finished, not being deleted);
- ``oversubscribed``: no node whose live pods request more GPUs than it has allocatable;
- ``bound-to-down-node``: no pod (finished ones aside) bound to a node that has been NotReady or missing
  for more than ``grace_s``;
- ``half-bound``: judged per slot of the recorded placement (the pod names in ``status.placement``): a
  slot is held when a pod of that name is bound, not being deleted and not Failed (one that finished
  successfully counts). No Running job may miss a slot, and no Placing or Recovering job may hold some
  but not all of them, for more than ``grace_s``; nor may a Queued or Failed job keep live pods that long.
  Pods are matched to slots by name, so pods left over from an earlier placement (on a broken node, say)
  never make a gang look whole;
- ``lost``: every job the run applied and did not delete still exists, and none stays without a status.

The two timed ones are charged only while the operator is up: the clock of a condition starts at the later
of its first sighting and the moment the current operator became leader. At the end of a run
:meth:`InvariantChecker.final` also wants every job Running, Queued, Succeeded or Failed, with a reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

GPU = "nvidia.com/gpu"
JOB_LABEL = "paralleljob.dev/job"
INDICES_ANNOTATION = "paralleljob.dev/gpu-indices"
SETTLED_PHASES = frozenset({"Running", "Queued", "Succeeded", "Failed"})
GANG_PHASES = frozenset({"Placing", "Running", "Recovering"})


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    job: str
    node: str
    phase: str
    deleting: bool
    gpus: int
    indices: tuple[int, ...]

    @property
    def live(self) -> bool:
        return bool(self.node) and self.phase not in ("Succeeded", "Failed") and not self.deleting


@dataclass(frozen=True, slots=True)
class JobView:
    name: str
    phase: str
    reason: str
    slots: tuple[str, ...]  # pod names of the recorded placement


@dataclass(frozen=True, slots=True)
class Snapshot:
    at: float
    ready: Mapping[str, bool]  # node -> Ready
    allocatable: Mapping[str, int]  # node -> GPUs
    pods: tuple[PodView, ...]
    jobs: Mapping[str, JobView]
    expected: frozenset[str] = frozenset()  # jobs that must be listed: applied before, not deleted during


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    subject: str
    detail: str
    at: float


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def pod_view(body: Mapping[str, Any]) -> PodView:
    meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    gpus = sum(_int(((c.get("resources") or {}).get("limits") or {}).get(GPU)) for c in spec.get("containers") or [])
    raw = str((meta.get("annotations") or {}).get(INDICES_ANNOTATION) or "")
    indices = tuple(_int(i) for i in raw.split(",") if i.strip())
    return PodView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        job=str((meta.get("labels") or {}).get(JOB_LABEL) or ""),
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        gpus=gpus,
        indices=indices,
    )


def snapshot(
    at: float,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    expected: Iterable[str] = (),
) -> Snapshot:
    ready: dict[str, bool] = {}
    allocatable: dict[str, int] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        status = node.get("status") or {}
        conditions = status.get("conditions") or []
        ready[name] = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        allocatable[name] = _int((status.get("allocatable") or {}).get(GPU))
    views = {}
    for job in jobs:
        status = job.get("status") or {}
        placement = status.get("placement") or {}
        name = str((job.get("metadata") or {}).get("name"))
        slots = tuple(str(p.get("name")) for p in placement.get("pods") or [])
        views[name] = JobView(name, str(status.get("phase") or ""), str(status.get("reason") or ""), slots)
    return Snapshot(at, ready, allocatable, tuple(pod_view(p) for p in pods), views, frozenset(expected))


@dataclass
class InvariantChecker:
    grace_s: float = 10.0
    expected: set[str] = field(default_factory=set)  # jobs applied and not deleted by the run (for final)
    down_since: dict[str, float] = field(default_factory=dict)  # node -> first seen NotReady/missing
    half_since: dict[str, float] = field(default_factory=dict)  # job -> first seen half-bound
    bare_since: dict[str, float] = field(default_factory=dict)  # job -> first seen without a status
    violations: list[Violation] = field(default_factory=list)
    checks: int = 0

    def _age(self, since: float, now: float, operator_up_since: float | None) -> float:
        if operator_up_since is None:
            return 0.0
        return now - max(since, operator_up_since)

    def check(self, snap: Snapshot, operator_up_since: float | None) -> list[Violation]:
        """Judge one snapshot; returns (and records) what it violates."""
        self.checks += 1
        now, found = snap.at, []
        used: Counter[tuple[str, int]] = Counter()
        requested: Counter[str] = Counter()
        for pod in snap.pods:
            if pod.live:
                requested[pod.node] += pod.gpus
                used.update((pod.node, i) for i in pod.indices)
        for (node, index), count in sorted(used.items()):
            if count > 1:
                found.append(Violation("gpu-twice", f"{node}/{index}", f"{count} live pods", now))
        for node, gpus in sorted(requested.items()):
            if node in snap.allocatable and gpus > snap.allocatable[node]:
                detail = f"{gpus} GPUs requested, {snap.allocatable[node]} allocatable"
                found.append(Violation("oversubscribed", node, detail, now))
        found += self._down_nodes(snap, operator_up_since)
        found += self._gangs(snap, operator_up_since)
        self.violations += found
        return found

    def _down_nodes(self, snap: Snapshot, up_since: float | None) -> list[Violation]:
        down = {n for n, ok in snap.ready.items() if not ok}
        nodes_in_use = {p.node for p in snap.pods if p.node}
        down |= {n for n in nodes_in_use if n not in snap.ready}
        self.down_since = {n: self.down_since.get(n, snap.at) for n in down}
        found = []
        for pod in snap.pods:
            if pod.node in down and pod.phase not in ("Succeeded", "Failed"):
                age = self._age(self.down_since[pod.node], snap.at, up_since)
                if age > self.grace_s:
                    detail = f"bound to {pod.node}, down for {age:.1f} s with the operator up"
                    found.append(Violation("bound-to-down-node", f"{pod.namespace}/{pod.name}", detail, snap.at))
        return found

    def _gangs(self, snap: Snapshot, up_since: float | None) -> list[Violation]:
        found = []
        for name in sorted(snap.expected - set(snap.jobs)):
            found.append(Violation("lost", name, "applied, never deleted, no longer in the API", snap.at))
        held: dict[str, set[str]] = {}
        live: Counter[str] = Counter()
        for pod in snap.pods:
            if pod.node and not pod.deleting and pod.phase != "Failed":
                held.setdefault(pod.job, set()).add(pod.name)
            live[pod.job] += pod.live
        half, bare = set(), set()
        bound: Counter[str] = Counter()
        for view in snap.jobs.values():
            if not view.phase:
                bare.add(view.name)
            bound[view.name] = len(held.get(view.name, set()) & set(view.slots))
            # Running: every slot must be held; Placing/Recovering: all or none (still on its way)
            missing = len(view.slots) - bound[view.name]
            if missing and (view.phase == "Running" or (view.phase in GANG_PHASES and bound[view.name])):
                half.add(view.name)
            elif view.phase in ("Queued", "Failed") and live[view.name]:
                half.add(view.name)  # its gang was given up: live pods left behind are half a gang too
        self.half_since = {j: self.half_since.get(j, snap.at) for j in half}
        self.bare_since = {j: self.bare_since.get(j, snap.at) for j in bare}
        for job in sorted(half):
            age = self._age(self.half_since[job], snap.at, up_since)
            if age > self.grace_s:
                gang = snap.jobs[job]
                detail = f"{gang.phase}: {bound[job]} of {len(gang.slots)} slots held by a bound pod for {age:.1f} s"
                found.append(Violation("half-bound", job, detail, snap.at))
        for job in sorted(bare):
            age = self._age(self.bare_since[job], snap.at, up_since)
            if age > self.grace_s:
                found.append(Violation("lost", job, f"no status for {age:.1f} s with the operator up", snap.at))
        return found

    def final(self, snap: Snapshot) -> list[Violation]:
        """After the chaos stopped and the cluster healed: every job settled, with a reason."""
        found = []
        for name in sorted(self.expected):
            job = snap.jobs.get(name)
            if job is None:
                found.append(Violation("lost", name, "missing at the end", snap.at))
            elif job.phase not in SETTLED_PHASES or not job.reason:
                detail = f"ended in phase {job.phase or '(none)'} with reason {job.reason or '(none)'}"
                found.append(Violation("unsettled", name, detail, snap.at))
        self.violations += found
        return found

    def summary(self) -> dict[str, int]:
        return dict(Counter(v.kind for v in self.violations))

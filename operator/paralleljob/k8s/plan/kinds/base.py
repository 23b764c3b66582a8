"""What every kind of gang answers, as three small protocols, and the :class:`Gang` that composes them.

- :class:`GangKind`: who makes the pods. A ParallelJob renders its own; an adopted pod group's pods are another
  controller's (Indexed Job, JobSet, PyTorchJob), which the operator only annotates and binds; a native
  PodGroup's are too, and wait for their ResourceClaims as well.
- :class:`Layout`: what a pod holds and so what breaks it: one TP group on an HGX node, or one whole NVL72 tray
  of a clique (one ComputeDomain per clique).
- :class:`Sizing`: rigid, or elastic between a minimum and a maximum of replicas.

The lifecycle driver (``jobdecision``, ``decide``, the admission modules) asks the job's :class:`Gang` and never
reads ``spec.podGroup``, the record's layout or the elastic range itself (``kinds/__init__`` says why the
three are separate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from paralleljob.core.elastic import ElasticRange, Resize
    from paralleljob.core.job import JobSpec
    from paralleljob.core.placing.eligibility import NodeFilter
    from paralleljob.core.placing.placement import Placement
    from paralleljob.k8s.edge.parse.pods import PodInfo
    from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
    from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
    from paralleljob.k8s.plan.actions import JobActions
    from paralleljob.k8s.plan.context import HeldJob, PassContext
    from paralleljob.k8s.plan.failure.breakage import Breakage
    from paralleljob.k8s.plan.pods.podsync import SyncResult
    from paralleljob.k8s.plan.status import StatusDraft


class GangKind(Protocol):
    """Who makes the pods, and so what the operator may do to them."""

    name: str
    renders_pods: bool  # the operator creates, re-creates and deletes them (else it only annotates and binds)

    def queued(
        self, ctx: PassContext, actions: JobActions, job: JobObject, pods: Sequence[PodInfo]
    ) -> JobRequest | None:
        """What a queued job hands to admission this pass (None: it waits, and ``actions`` says why)."""
        ...

    def finished_ranks(
        self, record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, recorded: Mapping[str, int]
    ) -> dict[str, int]:
        """The record's ranks that exited 0, slot name -> incarnation: ``recorded`` (the status's
        ``succeededPods``) where the slot kept its incarnation, and those whose pod is Succeeded now."""
        ...

    def observe(
        self, record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, finished: Mapping[str, int]
    ) -> SyncResult:
        """How many of the record's pods are bound, succeeded or failed (``finished``: the ranks the job's
        status says exited 0, ``podsync.finished_ranks``)."""
        ...

    def owner_gone(self, ctx: PassContext, actions: JobActions, pods: Sequence[PodInfo]) -> bool:
        """A placed job whose pods all left with their owner completes (True: done with the job this pass)."""
        ...

    def pod_names(self, record: PlacementRecord, pods: Sequence[PodInfo]) -> Mapping[str, str] | None:
        """Slot name -> the pod that holds it, where the pods are not named after their slots."""
        ...

    def sync(self, ctx: PassContext, held: HeldJob, record: PlacementRecord) -> None:
        """Bring the job's pods in line with ``record`` (create, delete, bind; or only annotate and bind)."""
        ...

    def repaired(self, record: PlacementRecord, moved: Sequence[PodSlot], strategy: str, maintenance: bool) -> str:
        """The repair's message once ``moved`` slots have new GPUs or a new incarnation (``maintenance``: a
        drain's move, not a failure's repair)."""
        ...

    def may_take_trays(self, request: JobRequest) -> bool:
        """Whether admission may place it over whole NVL72 trays (its pods then each hold one tray)."""
        ...

    def finish(self, ctx: PassContext, actions: JobActions, pods: Sequence[PodInfo], active: bool) -> None:
        """Last word on the pass's actions for the job (a pod group's pods are never deleted or created)."""
        ...


class Layout(Protocol):
    """What one pod of the gang holds, and how its failures and moves are carried out."""

    name: str

    def failure(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> bool:
        """Broken hardware or failed pods under the job, carried out through the failure policy and the pods
        brought in line; False when nothing broke."""
        ...

    def move(self, ctx: PassContext, held: HeldJob, breakage: Breakage, gang: Gang) -> None:
        """Move the pods ``breakage`` names (a drain) under the failure policy, and bring the pods in line."""
        ...

    def best_now(self, ctx: PassContext, held: HeldJob, node_filter: NodeFilter | None) -> Placement | None:
        """Where the placer would put the running job now, its own GPUs counted free (a move's candidate)."""
        ...

    def pods_to_move(self, ctx: PassContext, held: HeldJob, best: Placement) -> int:
        """The pods a move to ``best`` re-creates."""
        ...

    def moved(
        self, ctx: PassContext, held: HeldJob, best: Placement, epoch: int, reasons: tuple[str, ...]
    ) -> PlacementRecord:
        """The record after a move to ``best`` (already in the view's state): every pod restarts from its
        checkpoint there, with a new incarnation."""
        ...


class Sizing(Protocol):
    """Rigid or elastic: how many replicas the job may run, and what changes its size."""

    name: str
    resizes: bool  # its size may change while it runs, so it is decided on every pass

    def write_status(self, draft: StatusDraft, request: JobRequest, running: int) -> None:
        """The replica counts in the status (nothing for a rigid job)."""
        ...

    def smallest(self, request: JobRequest) -> JobSpec:
        """The smallest spec admission may place the job at."""
        ...

    def at_minimum(self, request: JobRequest) -> JobRequest:
        """``request`` as the queue policies gate and queue it: at the smallest size it may run at."""
        ...

    def min_gpus(self, request: JobRequest) -> int | None:
        """The GPUs it needs at its smallest (None: all of ``spec``'s, it is rigid)."""
        ...

    def at_admitted_size(self, request: JobRequest, data: int) -> JobRequest:
        """``request`` at the ``data`` replicas admission placed it with."""
        ...

    def admitted(self, ctx: PassContext, actions: JobActions, request: JobRequest) -> None:
        """Status for a job just admitted at ``request.spec``'s size."""
        ...

    def resize(self, ctx: PassContext, held: HeldJob) -> PlacementRecord | None:
        """A Running, fully bound job grown or scaled down; None when it stays."""
        ...

    def as_placed(self, job: JobObject, record: PlacementRecord) -> JobObject:
        """``job`` with its request at the size ``record`` runs it with (the size every other step handles)."""
        ...

    def dropped(self, ctx: PassContext, held: HeldJob, drop: Resize, message: str) -> PlacementRecord:
        """Carry out the core's drop of a broken replica (``core.failure.elastic_failure.drop_instead``)."""
        ...

    def range(self, request: JobRequest) -> ElasticRange | None:
        """The replicas the job may run between (None: rigid), for the core's resize and drop rules."""
        ...

    def may_take_trays(self, request: JobRequest) -> bool:
        """Whether admission may place it over whole NVL72 trays."""
        ...

    def pod_env(
        self, job: JobObject, request: JobRequest, record: PlacementRecord, slot: PodSlot
    ) -> Mapping[str, str | None]:
        """What its TP-group pod's environment has over the static rendezvous's (None: a variable left out)."""
        ...

    def pod_labels(self, job: JobObject, slot: PodSlot) -> Mapping[str, str]:
        """Labels its TP-group pod has besides the job's, replica's, stage's and node rank's."""
        ...


@dataclass(frozen=True, slots=True)
class Gang:
    """One job's kind, layout and sizing (``kinds.gangs.gang_of``)."""

    kind: GangKind
    layout: Layout
    sizing: Sizing

"""What one reconcile pass knows, as two small values handed down instead of long argument lists.

``PassContext`` is the same for every job of a pass: the cluster view (whose state the pass changes as it
allocates and releases), the placer over it, the jobs' node filters, the time, the queues and the facts the
runtime reported (holds, bind failures, refused pod templates), and the pass's own bookkeeping (each job's
actions, each job's pods). ``HeldJob`` is one job that holds a recorded placement, as the repair and
re-optimisation steps see it. Both are frozen dataclasses, so a step cannot rebind the view or the time under
the others; what they hold is not frozen: the view's state changes as the pass allocates and releases,
``shrinkable`` fills and empties as jobs are decided, and the actions ``actions_for`` hands out are written
by every step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.admit.gates import NEEDS_A_FIX
from paralleljob.core.placing.placer import Placer
from paralleljob.k8s.edge.parse.dra import ClaimInfo
from paralleljob.k8s.edge.parse.nativegroups import NativeGroup
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import MigGrant, PlacementRecord
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.admission.eligibility import Eligibility
from paralleljob.k8s.plan.status import counted, wait_message
from paralleljob.k8s.view.clusterview import ClusterView


@dataclass(frozen=True, slots=True)
class PassContext:
    view: ClusterView
    placer: Placer  # over the view's state (an empty one when the cluster has no GPU nodes)
    eligibility: Eligibility
    now: str  # the pass's time as the RFC 3339 stamp written into statuses
    now_s: float  # the same time in epoch seconds
    clock: Callable[[], float]  # for timing placement decisions only, never for deciding
    actions_for: Callable[[JobObject], JobActions]
    pods_of: Callable[[JobObject], Sequence[PodInfo]]
    queues: Mapping[str, QueueInfo] = field(default_factory=dict)
    jobs: Mapping[str, JobObject] = field(default_factory=dict)  # every ParallelJob of the pass, by key
    holds: Mapping[str, str] = field(default_factory=dict)  # job key -> why it must not be admitted just now
    bind_failures: Mapping[str, str] = field(default_factory=dict)  # job key -> why its gang was not bound
    invalid_pods: Mapping[str, str] = field(default_factory=dict)  # job key -> the API refused its pods
    # (node, GPU index) -> the pod running there as the pass began (podsync.gpu_holders)
    gpu_holders: Mapping[tuple[str, int], str] = field(default_factory=dict)
    # (priority, key) of the rigid jobs waiting for GPUs, highest first: elastic growth holds back for them
    # (a call: worked out only in a pass where an elastic job might grow)
    rigid_waiting: Callable[[], Sequence[tuple[int, str]]] = tuple
    # Running elastic jobs whose growth replicas a higher-priority job may take this pass (filled as jobs are
    # decided; plan/kinds/elastic_admission.py)
    shrinkable: dict[str, HeldJob] = field(default_factory=dict)
    # MIG slices this pass placed (admissions, repairs), by (node, GPU index): the view's records do not have
    # them until their status is written, and every later placement of the pass must see them
    slices_placed: dict[tuple[str, int], list[MigGrant]] = field(default_factory=dict)
    # MPS shares this pass placed, by (node, GPU index): (namespace, percent) per share, for the same reason
    shares_placed: dict[tuple[str, int], list[tuple[str, int]]] = field(default_factory=dict)
    # MIG slices this pass placed on device-plugin nodes: node -> a profile per slice (the GPU is the device
    # plugin's pick); and what was held there as the pass began, node -> profile -> slices, the records' and
    # other pods' (``slices/poolbook.held_at_start``, worked out once a pass)
    pool_slices_placed: dict[str, list[str]] = field(default_factory=dict)
    pool_held: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    pod_groups: Mapping[str, NativeGroup] = field(default_factory=dict)  # Kubernetes PodGroups by namespace/name
    resource_claims: Mapping[str, ClaimInfo] = field(default_factory=dict)  # ResourceClaims by namespace/name
    # job key -> when (epoch seconds) this operator last wrote its waiting message; within
    # ``message_refresh_s`` of that, a wait that only restates it keeps it (``status.wait_message``)
    message_written: Mapping[str, float] = field(default_factory=dict)
    message_refresh_s: float = 0.0
    # (job key, placement epoch) -> this operator's last re-price of the job on that placement (Observed)
    repriced_at: Mapping[tuple[str, int], float] = field(default_factory=dict)
    # a job's time to checkpoint before a drain moves it (the operator's --preemption-grace-seconds)
    checkpoint_grace_s: float = 30.0

    def wait(self, actions: JobActions, reason: str, message: str) -> None:
        """Set why a job waits: its ``Placed=False`` condition and ``status.reason``/``message`` (the message
        kept while fresh: ``wait_message``; moving figures dated: ``counted``). A wait that only a change by
        someone (:data:`~paralleljob.core.admit.gates.NEEDS_A_FIX`) ends gets a Warning Event when it starts."""
        written = self.message_written.get(actions.job.key)
        fresh = written is not None and self.now_s - written < self.message_refresh_s
        current = actions.job.status.condition("Placed")
        kept = wait_message(current, reason, counted(reason, message, self.now), fresh)
        actions.draft.waiting(reason, kept, self.now)
        if reason in NEEDS_A_FIX and (current is None or current.get("reason") != reason):
            actions.note("Warning", str(reason), message)


@dataclass(frozen=True, slots=True)
class HeldJob:
    actions: JobActions
    job: JobObject
    request: JobRequest
    record: PlacementRecord
    pods: Sequence[PodInfo]
    # its ranks that exited 0 (pod name -> slot incarnation, ``plan/pods/finished``): never re-created or moved
    finished: Mapping[str, int] = field(default_factory=dict)

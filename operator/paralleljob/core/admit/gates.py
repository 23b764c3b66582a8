"""Why a queued job is not admitted: the typed reasons and the pure checks both admission paths apply.

The operator has two admission paths, both core passes: strict FIFO (``core.admit.fifo``, through
``k8s/plan/admission/fifo_admission.py``) and the queueing planner (``core.admit.admission``, through
``k8s/plan/admission/policy_admission.py``); the simulator calls the same two. Every "no" they give is one of
:class:`WaitReason`, written as the ``Placed`` condition's reason, never recovered from a message's text.
The checks that come before any placement (:data:`ENTRY_CHECKS`, applied by :func:`entry_gate`) are one
list, evaluated in one order by every admission pass (``core.admit.fifo`` takes the verdict with each job; the
operator's ``policy_admission`` asks before the core's planner); the queue's cap is worded once
(:func:`quota_refusal`), for the core's pass and FIFO alike.
Kueue keeps the same shape: each admission check returns a typed condition reason, and its
``ClusterQueue`` quota check is one function shared by every queueing strategy.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass


class WaitReason(enum.StrEnum):
    QUEUE_NOT_FOUND = "QueueNotFound"  # spec.queue names no ParallelJobQueue
    QUEUE_REFUSED = "QueueRefused"  # the queue does not serve the job's namespace
    BACKING_OFF = "BackingOff"  # its last attempt failed; it waits before the next
    PREEMPTING = "Preempting"  # victims are stopping to make room for it
    NO_GPU_NODES = "NoGPUNodes"  # the cluster has no GPU node at all
    QUEUE_FULL = "QueueFull"  # its queue's maxGPUs would be exceeded
    WAITING = "Waiting"  # behind a head that does not fit (strict FIFO, or no backfill)
    RESERVED = "Reserved"  # the head: room is reserved for it at an expected start
    UNSCHEDULABLE = "Unschedulable"  # does not fit now


# Waits that end only when someone changes an object (the job's spec.queue, the queue's namespaces, a new
# ParallelJobQueue): the job would wait forever, so each is said with a Warning Event, not only a condition.
NEEDS_A_FIX = frozenset({WaitReason.QUEUE_NOT_FOUND, WaitReason.QUEUE_REFUSED})


@dataclass(frozen=True, slots=True)
class Gate:
    """A "not now" before any placement: the reason, its message, and whether it holds back the jobs behind
    it in a strict FIFO line (a job that merely cannot use this queue does not)."""

    reason: WaitReason
    message: str
    blocks_line: bool


@dataclass(frozen=True, slots=True)
class Entry:
    """What the entry checks need to know of one queued job, as plain values."""

    namespace: str
    queue: str
    served_namespaces: Collection[str]  # empty: every namespace
    backoff: str | None  # why it is backing off, or None
    making_room: str | None  # the preemption under way for it, described, or None
    has_gpu_nodes: bool


def served(entry: Entry) -> Gate | None:
    if entry.served_namespaces and entry.namespace not in entry.served_namespaces:
        why = f"queue {entry.queue} does not serve namespace {entry.namespace}"
        return Gate(WaitReason.QUEUE_REFUSED, why, blocks_line=False)
    return None


def not_backing_off(entry: Entry) -> Gate | None:
    return None if entry.backoff is None else Gate(WaitReason.BACKING_OFF, entry.backoff, blocks_line=True)


def no_room_in_the_making(entry: Entry) -> Gate | None:
    if entry.making_room is None:
        return None
    return Gate(WaitReason.PREEMPTING, entry.making_room, blocks_line=True)


def gpu_nodes_exist(entry: Entry) -> Gate | None:
    if entry.has_gpu_nodes:
        return None
    return Gate(WaitReason.NO_GPU_NODES, "the cluster has no GPU nodes", blocks_line=True)


# The admission checks before any placement, in the order every admission pass applies them; each is pure and
# says "not now" as a typed Gate (or None: it admits). A new check (an elastic job's minimum, say) goes here.
ENTRY_CHECKS: tuple[Callable[[Entry], Gate | None], ...] = (
    served,
    not_backing_off,
    no_room_in_the_making,
    gpu_nodes_exist,
)


def entry_gate(entry: Entry) -> Gate | None:
    """The first of :data:`ENTRY_CHECKS` that says "not now"; None: go on to the queue's cap and the placer."""
    for check in ENTRY_CHECKS:
        gate = check(entry)
        if gate is not None:
            return gate
    return None


def fails_for_good(permanent: bool, ran_before: bool) -> bool:
    """Whether a "no" fails the job now instead of making it wait: only a "never fits" verdict (a placer's
    ``PlacementInfeasible.permanent``, ``placing.eligibility.never_fits``) for a job that never ran. A job that
    ran before misses room that broken hardware took, which will be repaired: it waits like any other. The
    one rule behind every rejection: both core passes (``fifo``, ``admission``), the operator's check of every
    queued job before its line is decided (``fifo_admission.refuse_before_queueing``), and the simulator, which
    fails a job only on the core passes' word."""
    return permanent and not ran_before


def quota_refusal(queue: str, used_gpus: int, job_gpus: int, max_gpus: int | None) -> str | None:
    """Why admitting a job of ``job_gpus`` would break its queue's ``maxGPUs``, or None."""
    if max_gpus is None or used_gpus + job_gpus <= max_gpus:
        return None
    return (
        f"queue {queue} would hold {used_gpus + job_gpus} GPUs, above its maximum of {max_gpus} GPUs"
        f" (it holds {used_gpus}; this job needs {job_gpus})"
    )

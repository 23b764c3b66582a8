"""Status changes driven by the lifecycle table: every phase change is ``core.lifecycle.transition`` and
every event also sets the conditions listed for it here, so phase and conditions cannot disagree.

A :class:`StatusDraft` starts from the object's current status; the decisions apply events and fill in
fields; :meth:`StatusDraft.changed` tells the executor whether anything needs writing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paralleljob.core.lifecycle import Event, Phase, transition

_ABSENT = object()

# Event -> conditions it sets: (type, status, reason used when the caller gives none).
EVENT_CONDITIONS: dict[Event, tuple[tuple[str, str, str], ...]] = {
    Event.ACCEPTED: (("Accepted", "True", "Valid"), ("Placed", "False", "Waiting")),
    Event.REJECTED: (("Accepted", "False", "Rejected"), ("Failed", "True", "Rejected")),
    Event.ADMITTED: (("Placed", "True", "Placed"), ("Bound", "False", "Binding")),
    Event.BOUND: (("Bound", "True", "AllPodsBound"),),
    Event.BIND_FAILED: (("Bound", "False", "BindFailed"), ("Placed", "False", "RolledBack")),
    Event.HARDWARE_FAILED: (("Healthy", "False", "HardwareFailed"),),
    Event.WORKER_FAILED: (("Healthy", "False", "WorkerFailed"),),
    Event.REPAIRED: (("Healthy", "True", "Repaired"), ("Bound", "True", "AllPodsBound")),
    Event.MIGRATED: (("Bound", "False", "Migrating"),),
    Event.DRAINED: (("Bound", "False", "Drained"),),  # maintenance, not a failure: Healthy stays as it is
    Event.REQUEUED: (("Placed", "False", "Requeued"), ("Bound", "False", "Requeued")),
    Event.GAVE_UP: (("Failed", "True", "GaveUp"),),
    Event.PREEMPTED: (("Placed", "False", "Preempted"),),
    Event.COMPLETED: (("Succeeded", "True", "Completed"), ("Bound", "False", "Completed")),
}


class StatusDraft:
    __slots__ = ("data", "events", "generation", "original", "phase")

    def __init__(self, status: Mapping[str, Any], phase: Phase, generation: int) -> None:
        # Shallow copies: every change below replaces a top-level value (conditions are rebuilt as a new
        # list of new dicts), so the original is never mutated; a deep copy per job per pass was measurable.
        self.original: Mapping[str, Any] = status
        self.data: dict[str, Any] = dict(status)
        self.phase = phase
        self.generation = generation
        self.events: list[tuple[Event, str, str]] = []

    def apply(self, event: Event, reason: str, message: str, now: str) -> Phase:
        """Move the phase through the lifecycle table and set the event's conditions."""
        self.phase = transition(self.phase, event)
        self.data["phase"] = self.phase.value
        for ctype, cstatus, default_reason in EVENT_CONDITIONS[event]:
            self.condition(ctype, cstatus, reason or default_reason, message, now)
        self.data["reason"] = reason or EVENT_CONDITIONS[event][0][2]
        self.data["message"] = message
        self.events.append((event, reason, message))
        return self.phase

    def condition(self, ctype: str, cstatus: str, reason: str, message: str, now: str) -> None:
        """Set one condition; its transition time moves only when its status does. A condition that already
        says so is left as it is, its list too: a pass that decides a line of thousands of waiting jobs
        finds most of them waiting as they waited, and copying their conditions was most of what such a
        pass allocated (~1 KB a job, all at once)."""
        message = message[:2048]
        current = self.data.get("conditions") or []
        at = next((i for i, c in enumerate(current) if c.get("type") == ctype), None)
        match = current[at] if at is not None else None
        if (
            match is not None
            and match.get("status") == cstatus
            and match.get("reason") == reason
            and match.get("message") == message
            and match.get("observedGeneration") == self.generation
        ):
            return
        fields = {"status": cstatus, "reason": reason, "message": message, "observedGeneration": self.generation}
        conditions: list[dict[str, Any]] = []
        for i, c in enumerate(current):
            if i != at:
                conditions.append(dict(c))  # new dicts throughout: what is written is plain JSON
                continue
            conditions.append({**c, **fields})
            if c.get("status") != cstatus:
                conditions[-1]["lastTransitionTime"] = now
        if match is None:
            conditions.append(
                {
                    "type": ctype,
                    "status": cstatus,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                    "observedGeneration": self.generation,
                }
            )
        self.data["conditions"] = conditions

    def waiting(self, reason: str, message: str, now: str) -> None:
        """A waiting job's why: the ``Placed=False`` condition, and ``status.reason``/``status.message`` (the
        REASON printer column and the message every surface shows) set from it, not left at "Queued"."""
        self.condition("Placed", "False", reason, message, now)
        self.data["reason"] = str(reason)
        self.data["message"] = message[:2048]

    def set(self, **fields: Any) -> None:
        for key, value in fields.items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value

    def changed(self) -> bool:
        # Asked several times per job per pass (``JobActions.has_work``, ``writes_status``): field by field,
        # an untouched field is the original's own object, so most are settled by identity, where comparing
        # the dict with a JsonRecord whole goes through Mapping.__eq__, which copies both into new dicts.
        original, data = self.original, self.data
        if len(data) != len(original):
            return True
        for key, value in data.items():
            before = original.get(key, _ABSENT)
            if value is not before and (before is _ABSENT or value != before):
                return True
        return False

    def merge_patch(self) -> dict[str, Any]:
        """The change as a JSON merge patch (RFC 7386): removed fields become null so the API drops them."""
        return merge_patch(self.original, self.data)


# Waits whose messages carry figures that move while the job waits (free GPUs, a queue's holding): each
# such message says when it was counted, so the one kept (below) is never a claim about now.
COUNTED = frozenset({"Unschedulable", "QueueFull"})
_AS_OF = ", as of "


def counted(reason: str, message: str, now: str) -> str:
    """``message`` with the time its figures were counted, for a :data:`COUNTED` reason."""
    return f"{message}{_AS_OF}{now}" if reason in COUNTED else message


def _figures(message: str) -> str:
    """A message without its "as of" time: two countings that found the same figures say the same."""
    head, found, _ = message.rpartition(_AS_OF)
    return head if found else message


def wait_message(current: Mapping[str, Any] | None, reason: str, message: str, fresh: bool) -> str:
    """The message to write on a waiting job's ``Placed=False`` condition. A wait that only restates the one
    already written (same reason) with other figures ("needs 4 GPUs; 3 are free") keeps the written message
    while that is ``fresh`` (the operator wrote it less than ``OperatorConfig.waiting_message_refresh_s``
    ago): a line's head is looked at whenever GPUs come free, and rewriting its free count every time was a
    status write and a watch event per look (~1.5 per job in a 10,000-job flood), for a number stale again
    by the next finish. The figures of a kept message are dated (:func:`counted`), so what it says stays
    true; one that finds the same figures again keeps the written message, its date too, whatever its age.
    A new reason is always written."""
    if (
        current is not None
        and current.get("status") == "False"
        and current.get("reason") == reason
        and isinstance(current.get("message"), str)
        and (fresh or _figures(str(current["message"])) == _figures(message))
    ):
        return str(current["message"])
    return message


def wait_message_changed(draft: StatusDraft) -> bool:
    """Whether the draft writes a waiting message (``Placed=False``) the object does not carry: the time it
    is written starts the period ``wait_message`` keeps it for (the runtime and the test harness record it)."""
    written = _placed_message(draft.data)
    return written is not None and written != _placed_message(draft.original)


def _placed_message(status: Mapping[str, Any]) -> str | None:
    for c in status.get("conditions") or ():
        if c.get("type") == "Placed":
            return str(c.get("message")) if c.get("status") == "False" else None
    return None


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif value != before or key not in old:
            patch[key] = value
    return patch

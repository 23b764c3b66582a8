"""Typed errors of the placement core.

Every refusal carries its reasons as plain strings, so the operator can copy them into a ParallelJob's
conditions and the simulator into its log without re-deriving anything.
"""

from __future__ import annotations

from collections.abc import Sequence


class ParallelJobError(Exception):
    """Base class of every error the core raises on purpose."""


class InvalidRequest(ParallelJobError, ValueError):
    """Bad input (sizes < 1, negative memory, unknown GPU id...). Nothing about the cluster changed."""


class PlacementInfeasible(ParallelJobError):
    """No valid placement exists right now; ``reasons`` says why, most important first."""

    def __init__(self, job_id: str, reasons: Sequence[str], *, permanent: bool = False) -> None:
        self.job_id = job_id
        self.reasons = tuple(reasons)
        # permanent: the job can never fit this cluster (e.g. TP larger than any node), so waiting is futile.
        self.permanent = permanent
        super().__init__(f"cannot place {job_id}: " + "; ".join(self.reasons))


class IllegalTransition(ParallelJobError):
    """A lifecycle event that the state machine does not allow from the current phase."""

    def __init__(self, phase: str, event: str) -> None:
        self.phase = phase
        self.event = event
        super().__init__(f"event {event!r} is not allowed in phase {phase!r}")

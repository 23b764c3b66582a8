"""Re-optimisation: should a running job move to a cheaper placement at its next checkpoint boundary?

A repair (minimal or full) places a job on whatever is free at that moment; the job may then run for days
at a communication cost well above what the placer would choose once the hardware is back. Moving it
loses no work when it happens right after a checkpoint, but it costs a restart (pods deleted, re-created,
bound and rendezvoused, the checkpoint loaded), and every move risks a new failure. This module decides,
as a value, whether the gain is worth that; the operator and the simulator both call it and carry it out.

The rule (thresholds in :class:`ReoptimizeRule`, chosen from simulator runs, see docs/simulator.md):

1. Nothing to gain: no pod would move, or the best placement now costs no less than the current one.
2. The gain must be material: ``current / best >= min_cost_ratio`` and ``current - best >= min_saving_ms``.
3. The move must be cheap next to the checkpoint interval: ``restart_s + per_pod_s * pods_to_move <=
   max_overhead_share * checkpoint_interval_s``. A job that never checkpoints (infinite interval) has no
   boundary to move at, so it stays.
4. Unless the operator itself pushed the job off its placement for maintenance (a drain, ``drained_away``):
   moving back undoes a move the job never asked for, so rule 3 does not hold it there; a job that never
   checkpoints loses its work since the drain's move, so it moves back only for a large gain
   (``current / best >= drain_return_ratio``), a job that does checkpoint at its next boundary.

All four inputs are plain numbers, so the caller computes them however it likes (the simulator: the
current placement's cost, the placer's choice with the job's own GPUs counted as free, the pods whose GPUs
differ, the job's Young/Daly interval).

Which running jobs are re-priced at all, and when (:func:`reprice_now`): a job is a candidate only while it
runs (every pod bound) and once it was repaired (``restarts > 0``), pushed away by a drain, or placed above
its ideal cost (:func:`placed_dear`; the ideal: ``core.timing.ideal``). The last is a job admitted while the
cluster was fragmented: the placer chose the best of what was free then, and once GPUs come free a move at a
checkpoint may pay (simulated, leaving such jobs where they were admitted lengthened mean JCT under
failures, docs/simulator.md). A job at its ideal cost that neither failed nor moved is never re-priced: no
placement is cheaper. A candidate is re-priced at most once every :data:`RECHECK_SECONDS` (a trial placement
per job per pass would make a pass cost jobs x placement, for something that acts only at checkpoint
boundaries, minutes to hours apart), except when a move proposed earlier reached its checkpoint boundary: then
it is priced again at once, to move or not. A job that is a candidate only because it was placed dear is
first priced a recheck interval after it began running there, not at once: the placer had just chosen it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paralleljob.core.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class ReoptimizeRule:
    min_cost_ratio: float = 1.05  # current / best cost per step (swept 1.05 / 1.2 / 2: 1.05 best)
    min_saving_ms: float = 1.0  # current - best, per step
    restart_s: float = 60.0  # a migration's fixed price: stop, re-create, rendezvous, load the checkpoint
    per_pod_s: float = 0.5  # and per pod that moves (delete, create, bind; the operator does them in parallel)
    # The price must stay under this share of one checkpoint interval. A failure loses half an interval on
    # average; a move that costs more than a quarter of one is not worth a few percent. The simulator could
    # not discriminate 0.1 / 0.25 / 1 (Young/Daly intervals there are hours long, a restart a minute).
    max_overhead_share: float = 0.25
    # A job a drain pushed off its placement that never checkpoints moves back only when it runs at least this
    # much slower than it could: restarting loses its work since the drain's move (the case was 6.8x).
    drain_return_ratio: float = 1.5

    def __post_init__(self) -> None:
        numbers = ("min_cost_ratio", "min_saving_ms", "restart_s", "per_pod_s", "max_overhead_share")
        for name in (*numbers, "drain_return_ratio"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidRequest(f"ReoptimizeRule.{name} must be a finite number >= 0, got {value!r}")
        for name in ("min_cost_ratio", "drain_return_ratio"):
            if getattr(self, name) < 1.0:
                raise InvalidRequest(f"ReoptimizeRule.{name} must be >= 1, got {getattr(self, name)!r}")


DEFAULT_RULE = ReoptimizeRule()

RECHECK_SECONDS = 60.0  # the shortest time between two re-prices of one job
DEAR_TOLERANCE = 1e-6  # relative: a cost read back from a status is rounded to the microsecond


def placed_dear(cost_ms: float, ideal_ms: float) -> bool:
    """Whether a placement costing ``cost_ms`` is above the job's ideal (its best on the empty cluster), beyond
    rounding."""
    return cost_ms > ideal_ms * (1 + DEAR_TOLERANCE) + DEAR_TOLERANCE


@dataclass(frozen=True, slots=True)
class MoveBackAsk:
    """A job holding GPUs, as a shell sees it when it may re-price it for a move back."""

    running: bool  # phase Running with every pod bound (a restarting job is priced once it runs again)
    restarts: int  # the job's restart count (a repair, a requeue; core.failure.elastic_failure)
    drained_away: bool  # its last move was a drain's
    placed_dear: bool  # its placement costs more than its ideal (:func:`placed_dear`)
    checked_at_s: float | None  # its last re-price; None: never, or not since it last moved
    boundary_passed: bool = False  # a move proposed earlier has reached its checkpoint boundary
    running_since_s: float | None = None  # when it began running where it runs (None: not known)


@dataclass(frozen=True, slots=True)
class Reprice:
    now: bool  # price it against the best placement now, in this pass
    why: str


def move_back_candidate(ask: MoveBackAsk) -> bool:
    """Whether the job is re-priced for a move back at all (while it runs): repaired, drained away or placed
    dear. A shell that skips unchanged jobs between passes must not skip one of these: it is re-priced on a
    schedule (:func:`reprice_now`), not when something of its own changes."""
    return ask.restarts > 0 or ask.drained_away or ask.placed_dear


def reprice_now(ask: MoveBackAsk, now_s: float, every_s: float = RECHECK_SECONDS) -> Reprice:
    """Whether a shell re-prices this job for a move back now (the operator's ``reconsider``, the
    simulator's ``reoptimize_pass``), with why."""
    if not ask.running:
        return Reprice(False, "not running: a restarting job is priced once every pod runs again")
    if not move_back_candidate(ask):
        return Reprice(False, "at its ideal cost, never repaired nor drained away: no placement is cheaper")
    if ask.boundary_passed:
        return Reprice(True, "a move proposed earlier reached its checkpoint boundary")
    if ask.checked_at_s is None:
        if ask.restarts == 0 and not ask.drained_away and ask.running_since_s is not None:
            # placed dear by the placer, which chose the best of what was free: only GPUs freed since can make
            # a move pay, so it waits a recheck interval too (most short jobs end before they are ever priced)
            since = now_s - ask.running_since_s
            if since < every_s:
                return Reprice(False, f"placed dear {since:.0f} s ago, the best then; priced after {every_s:g} s")
        return Reprice(True, "not priced since it was last placed")
    since = now_s - ask.checked_at_s
    if since < every_s:
        return Reprice(False, f"priced {since:.0f} s ago; again after {every_s:g} s")
    return Reprice(True, f"last priced {since:.0f} s ago")


@dataclass(frozen=True, slots=True)
class MigrationDecision:
    migrate: bool
    reasons: tuple[str, ...]
    cost_ratio: float  # current / best (inf when best is 0 and current is not)
    saving_ms: float  # per step, >= 0
    overhead_s: float  # what the move would cost in wall seconds


def decide_migration(
    current_cost_ms: float,
    best_cost_ms: float,
    pods_to_move: int,
    checkpoint_interval_s: float,
    rule: ReoptimizeRule = DEFAULT_RULE,
    drained_away: bool = False,
) -> MigrationDecision:
    """Whether to migrate at the next checkpoint boundary, with the reasons either way. ``drained_away``: the
    job's last move was a drain's (rule 4)."""
    for name, value in (("current_cost_ms", current_cost_ms), ("best_cost_ms", best_cost_ms)):
        if not math.isfinite(value) or value < 0:
            raise InvalidRequest(f"{name} must be a finite number >= 0, got {value!r}")
    if pods_to_move < 0:
        raise InvalidRequest(f"pods_to_move must be >= 0, got {pods_to_move}")
    if math.isnan(checkpoint_interval_s) or checkpoint_interval_s <= 0:
        raise InvalidRequest(f"checkpoint_interval_s must be > 0 (inf: never), got {checkpoint_interval_s!r}")
    saving = max(0.0, current_cost_ms - best_cost_ms)
    ratio = current_cost_ms / best_cost_ms if best_cost_ms > 0 else (math.inf if current_cost_ms > 0 else 1.0)
    overhead = rule.restart_s + rule.per_pod_s * pods_to_move
    summary = (
        f"cost {current_cost_ms:.3f} ms now, {best_cost_ms:.3f} ms at best ({_ratio(ratio)});"
        f" {pods_to_move} pod(s) would move"
    )

    def no(reason: str) -> MigrationDecision:
        return MigrationDecision(False, (reason, summary), ratio, saving, overhead)

    if pods_to_move == 0 or saving <= 0:
        return no("already at the best placement available")
    if ratio < rule.min_cost_ratio:
        return no(f"the gain is small: {_ratio(ratio)} < {rule.min_cost_ratio:g}x")
    if saving < rule.min_saving_ms:
        return no(f"the gain is small: {saving:.3f} ms per step < {rule.min_saving_ms:g} ms")
    if drained_away and math.isinf(checkpoint_interval_s):
        if ratio < rule.drain_return_ratio:
            return no(
                f"moved by a drain, but the gain is too small to restart a job that never checkpoints:"
                f" {_ratio(ratio)} < {rule.drain_return_ratio:g}x"
            )
        return MigrationDecision(
            True,
            (
                f"move back from where a drain pushed it: {saving:.3f} ms per step saved ({_ratio(ratio)}); the"
                " job never checkpoints, so it is asked to (the checkpoint signal) and moved after it or the"
                " grace period",
                summary,
            ),
            ratio,
            saving,
            overhead,
        )
    if math.isinf(checkpoint_interval_s):
        return no("the job never checkpoints, so there is no boundary to migrate at")
    budget = rule.max_overhead_share * checkpoint_interval_s
    if overhead > budget and not drained_away:
        return no(
            f"moving costs {overhead:.0f} s, more than {rule.max_overhead_share:g} of the"
            f" {checkpoint_interval_s:.0f} s checkpoint interval ({budget:.0f} s)"
        )
    return MigrationDecision(
        True,
        (
            f"migrate at the next checkpoint boundary: {saving:.3f} ms per step saved ({_ratio(ratio)}),"
            f" for about {overhead:.0f} s of restart",
            summary,
        ),
        ratio,
        saving,
        overhead,
    )


def _ratio(ratio: float) -> str:
    return "the best costs nothing" if math.isinf(ratio) else f"{ratio:.2f}x the best"

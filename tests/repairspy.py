"""The two-shell tests' spy on the core's failure decision: each shell's module gets a ``decide_repair`` that
records (failure kind, restarts so far, a summary of the answer) before returning the core's own answer, so
the tests compare what both shells asked and were told, not a copy of the rule."""

from __future__ import annotations

from typing import Any

import pytest

from paralleljob.core.failure import repair


def summary(decision: repair.RepairDecision) -> tuple[Any, ...]:
    if isinstance(decision, repair.Rescheduled):
        groups = decision.placement.groups if decision.placement is not None else None
        return ("Rescheduled", groups, decision.restart_groups)
    if isinstance(decision, repair.GiveUp):
        return ("GiveUp", decision.reason)
    return ("Requeue",)


def spy_repairs(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []

    def recording(*args: Any) -> repair.RepairDecision:
        decision = repair.decide_repair(*args)
        failure = args[-1]
        seen.append((failure.kind, failure.restarts, summary(decision)))
        return decision

    monkeypatch.setattr(module, "decide_repair", recording)
    return seen

"""What the moves that free room say (``plan/moves/roommaking``): the waiting job's message naming the plan, the
note a moved job gets, and a dropped plan's reason. Plain words over the recorded plan and the view."""

from __future__ import annotations

from paralleljob.core.moves import MoveWhen
from paralleljob.k8s.edge.status.moveplans import MovePlanRecord, PlannedMove
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.view.clusterview import ClusterView


def planned_message(plan: MovePlanRecord, view: ClusterView, now_s: float) -> str:
    """The plan in words ("waits for 2 move(s) to free clique C: ns/a at its checkpoint in ~3 min, ns/b now"),
    a move done said so."""
    on = set(_on_held(plan, view))
    parts = [f"{m.job} {_when(m, now_s) if m.job in on else 'moved'}" for m in plan.moves]
    pending = sum(1 for m in plan.moves if m.job in on)
    return (
        f"waits for {pending} move(s) to free {plan.domain}: {', '.join(parts)}; planned loss"
        f" {plan.lost_gpu_s:.0f} GPU-seconds; its {len(plan.held_nodes)} held node(s) take no other job"
    )


def _on_held(plan: MovePlanRecord, view: ClusterView) -> list[str]:
    index = {name: i for i, name in enumerate(view.topology.node_names)}
    topology = view.state.topology
    gpus = [g for name in plan.held_nodes if name in index for g in topology.node_gpus(index[name])]
    return view.state.jobs_on(gpus)


def _when(move: PlannedMove, now_s: float) -> str:
    if move.when is MoveWhen.NOW:
        return "now"
    minutes = max(0.0, move.at_s - now_s) / 60
    if move.when is MoveWhen.AT_CHECKPOINT:
        return f"at its checkpoint in ~{minutes:.0f} min" if minutes >= 0.5 else "at its checkpoint (due)"
    return f"ends in ~{minutes:.0f} min"


def moved_note(waiting: str, plan: MovePlanRecord, lost_gpu_s: float, when: MoveWhen) -> str:
    how = "right after its checkpoint" if when is MoveWhen.AT_CHECKPOINT else "at once"
    return (
        f"moved {how} to free {plan.domain} for {waiting}; lost {lost_gpu_s:.0f} GPU-seconds of work,"
        " the whole gang restarts from its checkpoint"
    )


def dropped(actions: JobActions, plan: MovePlanRecord, why: str, now: str) -> None:
    """Give the plan up: its record goes, the reason stays (``status.moveCheck``, an Event); the job waits as
    before and is planned for again no sooner than a re-ask later."""
    message = f"the plan to free {plan.domain} was dropped: {why}"
    actions.draft.set(movePlan=None, moveCheck={"checkedAt": now, "answer": message})
    actions.note("Normal", "MovePlanDropped", message)

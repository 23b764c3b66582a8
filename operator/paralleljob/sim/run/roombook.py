"""What the simulator's room-making has planned and done (``sim/run/roommoves.py``): the plan in flight, what was
asked, and the tallies the report prints. Apart from ``roommoves`` so the engine's public surface
(``sim/run/surface.py``) can name it without importing the module that acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paralleljob.core.moveplan import MovePlan


@dataclass
class RoomBook:
    """The simulation's moves: the plan in flight, what was asked, what was done."""

    plan: MovePlan | None = None
    pending: set[str] = field(default_factory=set)  # jobs of the plan not moved or ended yet
    # (head, room epoch, time) of the last "no": asked again when the head or the room changed, not sooner
    # than ``roommoves.ASK_EVERY_S`` for the same head (every finish changes the room; the planner tries placements)
    asked: tuple[str, int, float] | None = None
    moved_at: dict[str, float] = field(default_factory=dict)
    move_times: list[float] = field(default_factory=list)
    plans: int = 0
    moves: int = 0
    stopped: int = 0  # relocate False: jobs stopped and requeued
    dropped: int = 0  # plans given up (a move no longer possible, their GPUs taken by a repair)
    overtaken: int = 0  # plans whose job a pass placed first (room came up elsewhere)
    lost_gpu_s: float = 0.0  # work thrown away by moves now (or stops)
    restart_gpu_s: float = 0.0  # GPUs held while the moved jobs restart

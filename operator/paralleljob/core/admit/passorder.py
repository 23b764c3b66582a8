"""The order of one scheduling pass's steps, the same in both shells.

A pass changes who holds which GPUs at several steps, and each step sees what the steps before it left:
a repaired job moved back first takes its better placement before a new job can take those GPUs; an elastic
job grows before the admissions, so a lower-priority waiting job never takes the GPUs it would grow into; a
job that can never fit fails before the queue's pass, wherever it stands in its line; moves that free room
for a blocked head are planned once the admissions have shown who is blocked. The operator's pass takes them
in this order (``k8s/plan/jobdecision.decide_job``: a running job is moved back before it is resized, every
running job before ``decide._admit``, whose admission paths refuse a never-fitting job before the queue's
core pass and ask room-making after it); the simulator's pass walks :data:`PASS_ORDER` itself
(``sim/run/passes.py``). ``tests/test_core_queue_two_shells.py`` checks both against it.
"""

from __future__ import annotations

import enum


class PassStep(enum.Enum):
    MOVE_BACK = "move-back"  # a repaired job re-priced, moved back when worth it (core.reoptimize)
    GROW = "grow"  # running elastic jobs grow into free GPUs (core.elastic.plan_growth)
    NEVER_FITS = "never-fits"  # every queued job that can never fit fails (core.admit.gates.fails_for_good)
    ADMIT = "admit"  # the queue's pass (core.admit.fifo or core.admit.admission)
    MAKE_ROOM = "make-room"  # moves that free room for a blocked head (core.moves)


PASS_ORDER: tuple[PassStep, ...] = (
    PassStep.MOVE_BACK,
    PassStep.GROW,
    PassStep.NEVER_FITS,
    PassStep.ADMIT,
    PassStep.MAKE_ROOM,
)

"""Trace-driven discrete-event simulator: replays cluster traces through the same core policies.

Modules: ``events`` (heap and clock), ``engine`` (the simulation), ``jobs`` and ``work`` (a job's phases,
progress and checkpoints), ``policies`` and ``core_queue`` (placement and queue policies, the seam for new
ones), ``failures`` (injection from published rates), ``ideal`` (the reference cost for slowdowns),
``trace``, ``alibaba`` and ``synth`` (trace input), ``clusters``, ``metrics``, ``report``, ``plots``,
``progress`` and ``cli`` (``paralleljob simulate``). Imports ``paralleljob.core`` only. See docs/simulator.md.
"""

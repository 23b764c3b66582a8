"""Trace-driven discrete-event simulator: replays cluster traces through the same core policies.

Rooms, each a layer that imports only the ones below it (an import-linter contract in pyproject.toml):

- ``cli``: ``paralleljob simulate``;
- ``report``: metrics across seeds (``compare``), the evidence experiments, plots, the Markdown report,
  progress lines;
- ``run``: the discrete-event ``engine`` and its ``events``, the placement and queue ``policies`` (with the
  ``volcano`` baseline and ``core_queue``), the ``steptime`` model, a job's phases and checkpoints (``jobs``,
  ``work``), the ideal cost (``ideal``), and what the engine tallies as it goes (``metrics``, ``tenants``);
- ``cluster``: cluster shapes (``clusters``) and the ``failures`` that break them;
- ``workload``: trace readers (``trace``, ``alibaba``), the synthetic generator (``synth``), the mixed
  workload and 3D overlay (``overlay``), and per-tenant ``quotas`` from a trace's demand.

Imports ``paralleljob.core`` only. See docs/simulator.md.
"""

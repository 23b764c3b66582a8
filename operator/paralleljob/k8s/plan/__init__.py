"""One reconcile pass: a snapshot of the stores and the kept view in, a ``Plan`` of actions out.

``decide`` is the entry point; it calls ``admission/`` (``fifo_admission`` for the per-queue FIFO,
``policy_admission`` for the core's fair-share/backfill/preemption pass, ``trayadmission`` and the waiting
memo), ``failure/`` (what broke and the failure policy's outcome), ``moves/`` (preemption, moving back,
making room), ``groups/`` (pod groups other controllers own) and ``kinds/`` (one interface per kind of
gang); ``pods/podsync`` turns a recorded placement into pod creates, binds and
deletes; ``status`` keeps phase and conditions in step; ``actions`` are the values the runtime's executor
carries out. No I/O, no asyncio, no wall clock in a decision. Not pure, though: the pass allocates and
releases GPUs in the view's state as it decides and updates the waiting memo it is handed (``decide.py``).
"""

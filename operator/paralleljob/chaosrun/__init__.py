"""Seeded chaos runs against a dev cluster: jobs applied and deleted, the operator SIGKILLed and
restarted, nodes flapping NotReady/Ready, deleted and re-created, unhealthy-GPU annotations set and
cleared, workers crashing; with the scheduling invariants checked from the API throughout.

- :mod:`.invariants` — what must hold, judged from listed API objects only (pure, clock passed in);
- :mod:`.monkey` — the seeded disturbances;
- :mod:`.run` — one bounded run, returning a report (operations, kills, checks, violations), with the
  operator as a subprocess (:mod:`paralleljob.devtools.operatorproc`) that it SIGKILLs and restarts;
- :mod:`.bench` — ``paralleljob bench chaos``: the long run on a fresh dev cluster.

The e2e test (``tests/e2e/chaos_e2e``) and the scale work reuse these; nothing here is test-only.
"""

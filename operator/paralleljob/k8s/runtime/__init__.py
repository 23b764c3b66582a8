"""The operator's I/O shell: everything that talks to the API server, waits or keeps time.

``cli`` (``paralleljob operator``) starts ``runner``, which supervises the metrics/health server
(``observe/metrics``, ``observe/health``), leader election (``election``), the watches (``reflector``) and
the reconcile loop (``reconciler``). Each pass reads the stores, asks ``plan.decide`` for a Plan and hands
it to ``executor``; ``observe/events`` posts Kubernetes Events in the background; ``memory/`` keeps the
heap flat. All requests go through ``api.Kube``.
"""

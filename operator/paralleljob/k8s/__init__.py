"""The Kubernetes operator: the only code that imports a Kubernetes client.

Four layers, each importing only the ones below it (an import-linter contract):

- ``runtime``: the I/O shell. The API client, watches and stores' feeding, leader election, the reconcile
  loop, the executor that carries a Plan out, events, metrics and health, the ``paralleljob operator`` CLI.
- ``plan``: one reconcile pass as pure functions: a snapshot in, a ``Plan`` of actions out (admission,
  failures, preemption, re-optimisation, pod groups, status changes). No I/O, no asyncio.
- ``view``: what the operator knows of the cluster between passes: the stores of watched objects and the
  cluster view the core places on, kept alive and patched, with its self-check. No I/O.
- ``edge``: the API's objects parsed into frozen values and the objects the operator writes, as plain dicts
  (nodes, pods, specs, records, manifests, DRA, quantities, constants, settings). Pure functions.

Benchmarks, the live demo and the kube-scheduler baseline are not shipped here: see ``paralleljob.devtools``.
"""

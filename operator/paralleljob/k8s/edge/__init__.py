"""The edge: Kubernetes objects (plain dicts) parsed into frozen values, and the objects the operator writes
built back as plain dicts. Pure functions, tested without a cluster; nothing here decides what to do.

``parse/`` reads what the cluster holds (nodes, pods, ParallelJobs, queues, DRA devices and taints,
PodGroups, Kubernetes' own matching rules and quantities); ``status/`` is the status the operator keeps on
its jobs (the placement record, move plans); ``render/`` builds what it writes (pods, Bindings,
ResourceClaims, ComputeDomains, workers' environment). At the top: the Lease (``lease``), names
(``constants``) and settings (``config``).
"""

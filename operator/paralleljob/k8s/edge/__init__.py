"""The edge: Kubernetes objects (plain dicts) parsed into frozen values, and the objects the operator writes
built back as plain dicts. Pure functions, tested without a cluster; nothing here decides what to do.

Nodes (``nodes``), pods (``pods``, ``noderank``, ``template``), ParallelJobs (``specs``, ``records``),
queues (``queues``), DRA (``dra``, ``taintrules``, ``claims``), what the operator writes (``manifests``),
Kubernetes' own rules (``matching``, ``quantity``), the Lease (``lease``), names (``constants``) and
settings (``config``).
"""

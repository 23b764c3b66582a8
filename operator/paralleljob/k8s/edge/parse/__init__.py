"""Kubernetes objects (plain dicts) parsed once into frozen values: jobs, nodes, pods, DRA devices and taints,
queues, PodGroups, templates and quantities."""

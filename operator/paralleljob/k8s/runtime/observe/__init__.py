"""What the operator tells the world: Prometheus metrics and /healthz, its log lines about passes, and Kubernetes
Events."""

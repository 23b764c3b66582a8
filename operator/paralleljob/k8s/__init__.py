"""The Kubernetes operator: the only code that imports kopf or a Kubernetes client."""

"""The Kubernetes operator: the only code that imports a Kubernetes client."""

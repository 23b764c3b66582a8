"""Objects the operator writes, as plain dicts: worker pods and their Bindings, ResourceClaims, ComputeDomains, and
the workers' environment."""

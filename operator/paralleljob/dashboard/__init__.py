"""The web view of the cluster (``paralleljob dashboard``): read-only, live, topology first."""

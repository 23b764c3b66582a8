"""A job's pods: whose pods are whose, bringing them in line with the recorded placement, and the ComputeDomains a
re-placed job no longer needs."""

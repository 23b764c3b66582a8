"""Pod groups other controllers' pods form (Indexed Job, JobSet, Kubernetes PodGroups): gang placement, their
status, shared claims, and groups on NVL72 trays."""

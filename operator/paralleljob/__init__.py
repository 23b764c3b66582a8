"""ParallelJob: topology-aware gang scheduling of TP x PP x DP training jobs.

The seed API lives here: ``from paralleljob import GPU, ClusterTopology, Job, GPUClusterScheduler``.
"""

from paralleljob.scheduler import GPU, ClusterTopology, GPUClusterScheduler, Job

__all__ = ["GPU", "ClusterTopology", "GPUClusterScheduler", "Job"]

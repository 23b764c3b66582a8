"""Names the operator shares with the cluster: API group, labels, annotations, resources.

Kept in one place so the CRDs, the pod manifests, the tests and the docs cannot drift apart.
"""

from __future__ import annotations

GROUP = "paralleljob.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ParallelJob"
PLURAL = "paralleljobs"
QUEUE_KIND = "ParallelJobQueue"
QUEUE_PLURAL = "paralleljobqueues"

SCHEDULER_NAME = "paralleljob-scheduler"
GPU_RESOURCE = "nvidia.com/gpu"
FIELD_MANAGER = "paralleljob-operator"

# Labels on every worker pod (and the Service's selector).
JOB_LABEL = "paralleljob.dev/job"
REPLICA_LABEL = "paralleljob.dev/replica"
STAGE_LABEL = "paralleljob.dev/stage"
# an elastic job's pods: the stable replica id (REPLICA_GROUP_ID), which the rendezvous Service selects by
REPLICA_GROUP_LABEL = "paralleljob.dev/replica-group"
NODE_RANK_LABEL = "paralleljob.dev/node-rank"  # under the job's rank order: torchrun's --node-rank
MANAGED_LABEL = "app.kubernetes.io/managed-by"
# On the operator's ResourceClaims (with JOB_LABEL): the worker pod the claim's devices are for.
POD_LABEL = "paralleljob.dev/pod"
# On the operator's shared MPS claims (one per namespace, GPU and share size, no JOB_LABEL): the share's percent.
MPS_SHARE_LABEL = "paralleljob.dev/mps-share"
MANAGED_VALUE = "paralleljob-operator"

# Annotations on worker pods.
GPU_INDICES_ANNOTATION = "paralleljob.dev/gpu-indices"
MIG_SLICE_ANNOTATION = "paralleljob.dev/mig-slice"  # a rank's MIG slice on its one GPU: <profile>@<start>
TARGET_NODE_ANNOTATION = "paralleljob.dev/node"
CHECKPOINT_BOUNDARY_ANNOTATION = "paralleljob.dev/checkpoint-boundary"
INCARNATION_ANNOTATION = "paralleljob.dev/incarnation"  # bumped when a pod must be re-created in place
# Set on a preemption victim's pods: checkpoint now; the pods are deleted at this time (RFC 3339, UTC).
CHECKPOINT_REQUESTED_ANNOTATION = "paralleljob.dev/checkpoint-requested"

# Annotation a training job may keep on its ParallelJob: when its last checkpoint completed (RFC 3339).
# Preemption prefers victims that lose the least work since then.
LAST_CHECKPOINT_ANNOTATION = "paralleljob.dev/last-checkpoint"

# Node signals written by the health agent (or by an admin).
UNHEALTHY_GPUS_ANNOTATION = "paralleljob.dev/unhealthy-gpus"
# The health agent's per-GPU detail (JSON {index: {state, reason, message}}); Degraded GPUs get no new work.
GPU_HEALTH_ANNOTATION = "paralleljob.dev/gpu-health"
GPU_HEALTHY_CONDITION = "GPUHealthy"
# Written by ``paralleljob drain`` (clitools/drain.py): the GPUs an admin took out for maintenance (the agent keeps
# them in unhealthy-gpus too), and of those the ones drained with ``--now`` (moved at once, no checkpoint wait).
DRAINED_GPUS_ANNOTATION = "paralleljob.dev/drained-gpus"
DRAIN_NOW_ANNOTATION = "paralleljob.dev/drain-now-gpus"

# NVIDIA GPU Feature Discovery labels.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
GPU_COUNT_LABEL = "nvidia.com/gpu.count"

MASTER_PORT = 29500
DEFAULT_QUEUE = "default"
# --queue-policy values; "strict-fifo" keeps the operator's own per-queue FIFO (k8s/plan/admission/fifo_admission.py).
QUEUE_POLICIES = ("strict-fifo", "fair", "fair-backfill", "fair-backfill-preempt")

# Pod groups: pods another controller creates (an Indexed Job, a JobSet), gang-placed by the operator
# through an adopting ParallelJob of the group's name (docs/pod-groups.md).
POD_GROUP_LABEL = "paralleljob.dev/pod-group"
PARALLELISM_ANNOTATION = "paralleljob.dev/parallelism"  # TPxPPxDP
RANK_ORDER_ANNOTATION = "paralleljob.dev/rank-order"
COST_MODEL_ANNOTATION = "paralleljob.dev/cost-model"
GPU_MEMORY_ANNOTATION = "paralleljob.dev/gpu-memory-gib"
QUEUE_ANNOTATION = "paralleljob.dev/queue"
PRIORITY_ANNOTATION = "paralleljob.dev/priority"
NODE_RANK_ANNOTATION = "paralleljob.dev/node-rank"  # explicit node rank of a group's pod
POD_GROUP_TIMEOUT_ANNOTATION = "paralleljob.dev/pod-group-timeout-seconds"
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # the Job controller's index


def object_key(namespace: str, name: str) -> str:
    """``namespace/name``: how the operator keys a namespaced object (a job, a pod group) everywhere."""
    return f"{namespace}/{name}"

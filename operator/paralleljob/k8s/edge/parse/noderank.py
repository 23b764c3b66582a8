"""The node rank of a pod group's pod, read from the index its own controller gave it (docs/pod-groups.md).

In this order, the first that is present wins:
1. ``paralleljob.dev/node-rank`` (annotation): explicit, for controllers with no index of their own;
2. JobSet: ``jobset.sigs.k8s.io/job-global-index`` x ``paralleljob.dev/pods-per-job`` plus the child
   Job's completion index (the count may be left out with a single child Job, or one pod per Job);
3. an Indexed Job's ``batch.kubernetes.io/job-completion-index`` (annotation, or label since Kubernetes 1.28);
4. Kubeflow's ``training.kubeflow.org/replica-index`` plus ``paralleljob.dev/node-rank-offset`` (default 0;
   a PyTorchJob's Worker template sets 1, its Master being node rank 0).
Labels and annotations are both read where a controller sets the key as both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paralleljob.k8s.edge.constants import COMPLETION_INDEX_KEY as COMPLETION_INDEX
from paralleljob.k8s.edge.constants import NODE_RANK_ANNOTATION as NODE_RANK

PODS_PER_JOB = "paralleljob.dev/pods-per-job"
NODE_RANK_OFFSET = "paralleljob.dev/node-rank-offset"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"


class _NotARank(ValueError):
    pass


def _number(metadata: Mapping[str, Any], key: str) -> int | None:
    for where in ("annotations", "labels"):
        value = (metadata.get(where) or {}).get(key)
        if value is None:
            continue
        text = str(value).strip()
        if not text.isdigit():
            raise _NotARank(f"{where[:-1]} {key}={value!r} is not a whole number >= 0")
        return int(text)
    return None


def node_rank_of(metadata: Mapping[str, Any]) -> tuple[int | None, str]:
    """(node rank, "") or (None, why there is none)."""
    try:
        explicit = _number(metadata, NODE_RANK)
        if explicit is not None:
            return explicit, ""
        completion = _number(metadata, COMPLETION_INDEX)
        job_index = _number(metadata, JOBSET_GLOBAL_INDEX)
        if job_index is not None and completion is not None:
            per_job = _number(metadata, PODS_PER_JOB)
            if per_job is None and (job_index == 0 or completion == 0):
                # one child Job (a TrainJob's "node" Job) or one pod per Job: no count needed
                return job_index + completion, ""
            if per_job is None or completion >= per_job:
                why = f"JobSet child Job {job_index}'s completion index {completion} needs annotation {PODS_PER_JOB}"
                return None, f"{why} (the pods per child Job){'' if per_job is None else f', now {per_job}'}"
            return job_index * per_job + completion, ""
        if completion is not None:
            return completion, ""
        replica = _number(metadata, KUBEFLOW_REPLICA_INDEX)
        if replica is not None:
            return replica + (_number(metadata, NODE_RANK_OFFSET) or 0), ""
    except _NotARank as exc:
        return None, str(exc)
    return None, f"it has no node rank: set annotation {NODE_RANK} or use an Indexed Job"

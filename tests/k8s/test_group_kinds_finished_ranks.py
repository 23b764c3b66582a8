"""A rank that finished early and whose pod the pod GC took, for every kind of pod group: an Indexed Job's
(rank from the completion index), a native PodGroup's (node rank by annotation), a CompositePodGroup's (ranks
across its children) and a JobSet of multi-pod Jobs (the Job's global index and its completion index). The
Job controller counts a finished index and never makes it again, so each group must complete when its other
ranks finish, free its GPUs, show the collected rank in ``describe``, and never touch a pod but to bind it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from paralleljob.clitools.describe import describe_job
from paralleljob.clitools.gpumap import FREE, build_map_and_view
from paralleljob.k8s.edge.constants import COMPLETION_INDEX_KEY
from paralleljob.k8s.edge.parse.pods import parse_pod
from tests.k8s.harness import FakeCluster
from tests.k8s.test_composite_pod_groups import gang_of_gangs, member
from tests.k8s.test_k8s_pod_groups import cluster_with, group_pod, no_writes_but_binds, succeed
from tests.k8s.test_native_pod_groups import add, adopt, cluster, native_pod, pod_group

JOBSET_KEYS = ("jobset.sigs.k8s.io/job-global-index", "paralleljob.dev/pods-per-job")


def _indexed_job() -> tuple[FakeCluster, str]:
    return cluster_with([group_pod(i) for i in range(4)]), "ns/llm"


def _native() -> tuple[FakeCluster, str]:
    fc = cluster()
    fc.pod_groups["ns/llm-workers"] = pod_group()
    add(fc, *(native_pod(r) for r in range(4)))
    adopt(fc)
    return fc, "ns/llm-workers"


def _composite() -> tuple[FakeCluster, str]:
    fc = cluster()
    gang_of_gangs(fc)
    add(fc, *(member(r) for r in range(4)))
    adopt(fc)
    return fc, "ns/train"


def _jobset_pod(rank: int) -> dict[str, Any]:
    """Pod ``rank`` of a JobSet of two 2-pod Indexed Jobs: its Job's global index and its completion index."""
    keys = {JOBSET_KEYS[0]: str(rank // 2), COMPLETION_INDEX_KEY: str(rank % 2), JOBSET_KEYS[1]: "2"}
    return group_pod(None, extra_annotations=keys)


def _jobset() -> tuple[FakeCluster, str]:
    return cluster_with([_jobset_pod(r) for r in range(4)]), "ns/llm"


def _by_rank(fc: FakeCluster) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for body in fc.pods.values():
        rank = parse_pod(body).group_rank
        assert rank is not None, body["metadata"]
        out[rank] = body
    return out


@pytest.mark.parametrize(
    ("make", "early_rank"),
    [
        pytest.param(_indexed_job, 2, id="indexed-job"),
        pytest.param(_native, 2, id="native-podgroup"),
        pytest.param(_composite, 3, id="composite-second-child"),
        pytest.param(_jobset, 1, id="jobset-second-pod-of-first-job"),  # completion index 1, Job index 0
    ],
)
def test_a_collected_finished_rank_still_counts_for_completion(
    make: Callable[[], tuple[FakeCluster, str]], early_rank: int
) -> None:
    fc, job = make()
    no_writes_but_binds(fc)
    assert fc.phase(job) == "Running" and len(fc.binds) == 4
    early = _by_rank(fc)[early_rank]
    succeed(fc, early)
    no_writes_but_binds(fc, 1)
    assert len(fc.job(job)["status"]["succeededPods"]) == 1
    del fc.pods[("ns", early["metadata"]["name"])]  # the pod GC, once the controller counted the finished index
    no_writes_but_binds(fc)
    assert fc.phase(job) == "Running", fc.job(job)["status"]
    described = describe_job(fc.job(job), list(fc.pods.values()))
    assert sorted(p.pod_phase for p in described.pods) == ["Running"] * 3 + ["Succeeded (pod deleted)"]
    for pod in list(fc.pods.values()):
        succeed(fc, pod)
    no_writes_but_binds(fc, 2)
    status = fc.job(job)["status"]
    assert (status["phase"], status["message"]) == ("Succeeded", "all 4 workers succeeded"), status
    assert "succeededPods" not in status
    gpu_map, _ = build_map_and_view(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    assert gpu_map.totals[FREE] == 32, gpu_map.totals

"""A rank that finished early and whose pod the pod GC took, for the pod groups the Indexed Job test does not
cover: a native PodGroup (node rank by annotation), a CompositePodGroup (ranks across its children) and a
JobSet of multi-pod Jobs (rank from the Job's global index and completion index). Each must complete when its
other ranks finish, free its GPUs, and show the collected rank in ``describe``."""

from __future__ import annotations

import copy
from typing import Any

from paralleljob.clitools.describe import describe_job
from paralleljob.clitools.gpumap import FREE, build_map_and_view
from paralleljob.k8s.edge.constants import COMPLETION_INDEX_KEY
from paralleljob.k8s.edge.parse.pods import parse_pod
from tests.k8s.harness import FakeCluster
from tests.k8s.test_composite_pod_groups import gang_of_gangs, member
from tests.k8s.test_k8s_pod_groups import cluster_with, group_pod
from tests.k8s.test_native_pod_groups import add, adopt, cluster, native_pod, pod_group

JOBSET_KEYS = ("jobset.sigs.k8s.io/job-global-index", "paralleljob.dev/pods-per-job")


def _by_rank(fc: FakeCluster) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    for key, body in fc.pods.items():
        rank = parse_pod(body).group_rank
        assert rank is not None, body["metadata"]
        out[rank] = key
    return out


def _succeed(fc: FakeCluster, key: tuple[str, str]) -> None:
    fc.pods[key] = copy.deepcopy(fc.pods[key])  # a new version, as the API makes
    fc.pods[key]["status"]["phase"] = "Succeeded"


def _native(fc: FakeCluster) -> str:
    fc.pod_groups["ns/llm-workers"] = pod_group()
    add(fc, *(native_pod(r) for r in range(4)))
    adopt(fc)
    return "ns/llm-workers"


def _composite(fc: FakeCluster) -> str:
    gang_of_gangs(fc)
    add(fc, *(member(r) for r in range(4)))
    adopt(fc)
    return "ns/train"


def _jobset_pod(rank: int) -> dict[str, Any]:
    """Pod ``rank`` of a JobSet of two 2-pod Indexed Jobs: its Job's global index and its completion index."""
    keys = {JOBSET_KEYS[0]: str(rank // 2), COMPLETION_INDEX_KEY: str(rank % 2), JOBSET_KEYS[1]: "2"}
    return group_pod(None, extra_annotations=keys)


def _check(fc: FakeCluster, job: str, early_rank: int) -> None:
    fc.settle()
    assert fc.phase(job) == "Running" and len(fc.binds) == 4
    early = _by_rank(fc)[early_rank]
    _succeed(fc, early)
    fc.settle(1)
    assert len(fc.job(job)["status"]["succeededPods"]) == 1
    del fc.pods[early]  # the pod GC, once the controller counted the finished index
    fc.settle()
    assert fc.phase(job) == "Running", fc.job(job)["status"]
    described = describe_job(fc.job(job), list(fc.pods.values()))
    assert sorted(p.pod_phase for p in described.pods) == ["Running"] * 3 + ["Succeeded (pod deleted)"]
    for key in list(fc.pods):
        _succeed(fc, key)
    fc.settle(2)
    status = fc.job(job)["status"]
    assert (status["phase"], status["message"]) == ("Succeeded", "all 4 workers succeeded"), status
    gpu_map, _ = build_map_and_view(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    assert gpu_map.totals[FREE] == 32, gpu_map.totals


def test_a_native_podgroups_collected_rank_still_counts_for_completion() -> None:
    fc = cluster()
    _check(fc, _native(fc), early_rank=2)


def test_a_composite_groups_collected_rank_in_its_second_child_still_counts_for_completion() -> None:
    fc = cluster()
    _check(fc, _composite(fc), early_rank=3)  # the followers' second pod


def test_a_jobsets_collected_rank_of_a_multi_pod_job_still_counts_for_completion() -> None:
    fc = cluster_with([_jobset_pod(r) for r in range(4)])
    _check(fc, "ns/llm", early_rank=1)  # the first Job's second pod: its completion index 1, not its Job's index

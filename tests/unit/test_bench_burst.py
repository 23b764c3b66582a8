"""The burst part of ``bench kueue``: what each side is given, how its gangs are timed and set against the
ceiling, and which cluster measures it."""

from __future__ import annotations

import json
from typing import Any

from paralleljob.devtools import bench_burst
from paralleljob.devtools.bench_kueue_parts import Stage, cluster_stages, controllers_needed


def test_a_kueue_gang_is_one_suspended_indexed_job_of_one_gpu_pods_in_the_burst_queue() -> None:
    job = bench_burst.kueue_gang("b0007", 40)
    spec = job["spec"]
    assert (spec["completionMode"], spec["parallelism"], spec["completions"], spec["suspend"]) == (
        "Indexed",
        40,
        40,
        True,
    )
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": bench_burst.QUEUE}
    (container,) = spec["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "annotations" not in spec["template"].get("metadata", {})  # the pods run until deleted


def test_our_gang_is_dp_pods_of_one_gpu_in_the_burst_queue() -> None:
    job = bench_burst.our_gang("b0007", 40)
    assert job["spec"]["parallelism"] == {"tensor": 1, "pipeline": 1, "data": 40}
    assert job["spec"]["queue"] == bench_burst.QUEUE


def test_kueues_queue_has_every_gpu_no_cohort_and_no_topology() -> None:
    objects = {body["kind"]: body for _, body in bench_burst.queue_objects("kueue", 2000)}
    assert set(objects) == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert "topologyName" not in objects["ResourceFlavor"]["spec"]
    queue = objects["ClusterQueue"]["spec"]
    assert "cohortName" not in queue
    assert queue["resourceGroups"][0]["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "2000"}]
    assert objects["LocalQueue"]["metadata"]["namespace"] == bench_burst.NAMESPACES["kueue"]
    ((path, queue_object),) = bench_burst.queue_objects("ours", 2000)
    assert queue_object["kind"] == "ParallelJobQueue" and path.endswith("/paralleljobqueues")


def _pod(name: str, gang: str, node: str | None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "ownerReferences": [{"name": gang}]},
        "spec": {"nodeName": node} if node else {},
    }


class _NoKube:
    pass


def test_a_pod_counts_when_first_seen_bound_and_a_gang_is_whole_at_its_last_bind(monkeypatch: Any) -> None:
    tracker = bench_burst.Bound(_NoKube(), "ns")  # type: ignore[arg-type]
    clock = iter([10.0, 11.0, 12.0, 13.0, 14.0])
    monkeypatch.setattr(bench_burst.time, "monotonic", lambda: next(clock))
    tracker.seen(_pod("a-0", "a", None))  # created, not bound: not counted
    tracker.seen(_pod("a-0", "a", "n1"))  # 10
    tracker.seen(_pod("a-0", "a", "n1"))  # seen again: its first bind stays
    tracker.seen(_pod("b-0", "b", "n2"))  # 11
    tracker.seen(_pod("a-1", "a", "n3"))  # 12
    assert tracker.bound_at == {"a-0": 10.0, "b-0": 11.0, "a-1": 12.0}
    # gang b has one of its two pods bound: not whole, not timed
    assert bench_burst.gang_times(tracker, started=9.0, pods=2) == [3.0]
    assert bench_burst.gang_times(tracker, started=9.0, pods=1) == [2.0, 3.0]


def _burst(pods_per_s: float, controller: str) -> dict[str, Any]:
    return {
        "gangs": 50,
        "pods": 2000,
        "seconds": round(2000 / pods_per_s, 2),
        "pods_per_s": pods_per_s,
        "gang_whole_s": {"first": 1.0, "median": 4.0, "last": 8.0},
        "requests_per_pod": {"all": 3.1},
        "processes": {controller: {"cpu_s": 12.5, "peak_rss_mb": 300.0}},
    }


def test_each_burst_is_a_share_of_the_create_bind_ceiling_and_ours_is_set_over_kueues() -> None:
    ceiling = {
        "create_bind": {"pods_per_s": 400.0},
        "create_bind_spec": {"pods_per_s": 320.0},
        "create_bind_worker": {"pods_per_s": 300.0},
    }
    bursts = {"kueue": _burst(100.0, "kueue-controller-manager"), "ours": _burst(300.0, "operator")}
    shares = bench_burst.against_ceiling(ceiling, bursts)
    assert shares["kueue"]["share_of_create_bind"] == 0.25
    assert shares["ours"]["share_of_create_bind"] == 0.75
    assert shares["ours"]["share_of_create_bind_spec"] == 0.938
    assert shares["ours"]["share_of_create_bind_worker"] == 1.0
    assert shares["ours_over_kueue"] == 3.0
    alone = bench_burst.against_ceiling({"create_bind": ceiling["create_bind"]}, {"ours": bursts["ours"]})
    assert alone == {"ours": {"pods_per_s": 300.0, "share_of_create_bind": 0.75}}  # no sized passes, no ratio
    rows = bench_burst.table(bursts, shares).splitlines()
    kueue_row = "| kueue | 50 x 40 | 20.0 | 100.0 | 0.25 / 0.312 / 0.333 | 1.0 / 4.0 / 8.0 | 3.1 | 12.5 |"
    assert rows[2].startswith(kueue_row)
    assert rows[3].startswith("| ours | 50 x 40 | 6.67 | 300.0 | 0.75 / 0.938 / 1.0 |")
    bursts["ours"]["gang_whole_s"] = {}  # stopped before any gang was whole
    assert "| - / - / - |" in bench_burst.table(bursts, shares).splitlines()[3]


def test_a_burst_needs_kueue_only_when_kueue_bursts_and_fresh_clusters_give_each_side_its_own() -> None:
    assert controllers_needed({"burst"}, "ours") == ()
    assert controllers_needed({"burst"}, "both") == ("jobset", "kueue")
    first, second = cluster_stages({"ceiling", "burst"}, ("ours", "kueue"), fresh=True)
    assert first == Stage(frozenset({"ceiling", "burst"}), ("ours",), (), operator=True)
    assert second == Stage(frozenset({"burst"}), ("kueue",), ("jobset", "kueue"), operator=False)
    (shared,) = cluster_stages({"ceiling", "burst", "throughput"}, ("kueue", "ours"), fresh=False)
    assert shared.parts == frozenset({"ceiling", "burst", "throughput"}) and shared.order == ("kueue", "ours")


def test_the_worker_sized_ceiling_pod_is_the_operators_worker_that_nothing_but_the_client_acts_on() -> None:
    from paralleljob.devtools.bench_ceiling import NO_SCHEDULER, _rendered_worker, pod_manifest, worker_manifest

    pod = worker_manifest("create-bind-worker-000017", ends_at_once=True)
    rendered = _rendered_worker()
    assert pod["metadata"]["name"] == pod["spec"]["hostname"] == "create-bind-worker-000017"
    assert "ownerReferences" not in pod["metadata"] and pod["spec"]["schedulerName"] == NO_SCHEDULER
    assert not any(key.startswith("paralleljob.dev/") for key in pod["metadata"]["labels"])
    assert len(pod["metadata"]["labels"]) == len(rendered["metadata"]["labels"])
    assert pod["spec"]["containers"] == rendered["spec"]["containers"]  # the torchrun env, the GPU
    assert pod["metadata"]["annotations"]["kwok.paralleljob.dev/complete-after"] == "0s"
    assert rendered["metadata"]["name"] != "create-bind-worker-000017"  # the cached render is not changed
    assert len(json.dumps(pod)) > 5 * len(json.dumps(pod_manifest("create-bind-000017")))


def test_the_spec_minimum_ceiling_pod_keeps_only_what_the_spec_names_of_the_operators_worker() -> None:
    from paralleljob.devtools.bench_ceiling import (
        NO_SCHEDULER,
        SPEC_ENV,
        _rendered_worker,
        pod_manifest,
        spec_minimum_manifest,
        worker_manifest,
    )

    pod = spec_minimum_manifest("create-bind-spec-000017", ends_at_once=True)
    rendered_env = {item["name"]: item["value"] for item in _rendered_worker()["spec"]["containers"][0]["env"]}
    (container,) = pod["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert len(SPEC_ENV) == 15 and set(env) == SPEC_ENV  # the renderer still writes every one the SPEC names
    assert env == {name: rendered_env[name] for name in SPEC_ENV}  # with the operator's values
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    labels = pod["metadata"]["labels"]
    assert sorted(labels) == [f"bench.paralleljob.dev/{key}" for key in ("job", "replica", "stage")]
    assert pod["metadata"]["annotations"] == {
        "bench.paralleljob.dev/gpu-indices": "3",
        "kwok.paralleljob.dev/complete-after": "0s",
    }
    assert "ownerReferences" not in pod["metadata"] and pod["spec"]["schedulerName"] == NO_SCHEDULER
    assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"]
    assert "hostname" in worker_manifest("create-bind-worker-000017")["spec"]  # the worker's copy is not changed
    size = len(json.dumps(spec_minimum_manifest("create-bind-spec-000017")))
    assert 3 * len(json.dumps(pod_manifest("create-bind-000017"))) < size
    assert size < 0.8 * len(json.dumps(worker_manifest("create-bind-worker-000017")))


def test_ceiling_rounds_rotate_the_passes_and_keep_each_passs_medians() -> None:
    from paralleljob.devtools.bench_ceiling import PASSES, median_run, rotated

    orders = [rotated(PASSES, r) for r in range(len(PASSES))]
    assert orders[0] == PASSES and all(sorted(order) == sorted(PASSES) for order in orders)
    assert len({order[0] for order in orders}) == len(PASSES)  # each pass leads one round
    one = {"pods": 10, "concurrency": 2, "seconds": 2.0, "pods_per_s": 5.0, "requests_per_s": 10.0}
    assert median_run([one]) == one  # a single run reads as before
    runs = [
        {**one, "seconds": 2.0, "pods_per_s": 5.0, "requests_per_s": 10.0},
        {**one, "seconds": 4.0, "pods_per_s": 2.5, "requests_per_s": 5.0},
        {**one, "seconds": 1.0, "pods_per_s": 10.0, "requests_per_s": 20.0},
        {**one, "seconds": 1.6, "pods_per_s": 6.25, "requests_per_s": 12.5},
    ]
    merged = median_run(runs)
    assert merged["pods_per_s"] == 5.62 and merged["seconds"] == 1.8 and merged["requests_per_s"] == 11.25
    assert merged["runs_pods_per_s"] == [5.0, 2.5, 10.0, 6.25] and merged["pods"] == 10

"""The ceiling and drain arithmetic of ``bench kueue --kueue-parts ceiling,throughput``, its table, and a drain's
progress series in windows."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest import MonkeyPatch

from paralleljob.devcluster.kwok import COMPLETE_AFTER_ANNOTATION
from paralleljob.devtools.bench_ceiling import binding, pod_manifest
from paralleljob.devtools.bench_flow import COHORT_SIZE, flow_kueue_objects, indexed_job, parallel_job, shapes
from paralleljob.devtools.flow_report import against_ceiling, capacity_floor_s, cpu_and_rss, rate, share, table


def _ceiling() -> dict:
    return {
        "create_bind": {"pods": 1000, "seconds": 4.0, "pods_per_s": 250.0},
        "create_bind_status": {"pods": 1000, "seconds": 8.0, "pods_per_s": 125.0},
        "lifecycle": {"pods": 1000, "seconds": 20.0, "pods_per_s": 50.0},
    }


def _drain(seconds: float, controller: str) -> dict:
    return {
        "jobs": 100,
        "pods": 250,
        "drain_s": seconds,
        "capacity_floor_s": 5.0,
        "requests_per_job": {"all": 30.5},
        "processes": {
            controller: {"cpu_s": 3.0, "peak_rss_mb": 90.0},
            "kube-scheduler": {"cpu_s": 1.0, "peak_rss_mb": 70.0},
        },
    }


def test_rate_and_share_refuse_to_divide_by_nothing() -> None:
    assert rate(10, 4.0) == 2.5
    assert rate(10, 0.0) == 0.0
    assert share(50.0, 200.0) == 0.25
    assert share(50.0, 0.0) is None


def test_capacity_floor_is_gpu_seconds_over_gpus_or_the_longest_run() -> None:
    # 2 x 4 GPUs for 10 s and 1 x 1 for 3 s: 83 GPU-s on 8 GPUs is 10.4 s
    assert capacity_floor_s([(2, 4, 0, 10.0), (1, 1, 0, 3.0)], 8) == 10.4
    # plenty of GPUs: the longest run bounds it
    assert capacity_floor_s([(1, 1, 0, 7.0), (1, 1, 0, 2.0)], 1000) == 7.0
    assert capacity_floor_s([], 8) == 0.0


def test_each_drain_is_a_share_of_both_ceilings_and_the_ratio_says_who_was_faster() -> None:
    shares = against_ceiling(
        _ceiling(), {"kueue": _drain(20.0, "kueue-controller-manager"), "ours": _drain(10.0, "operator")}
    )
    assert shares["ours"]["pods_per_s"] == 25.0
    assert shares["ours"]["share_of_create_bind"] == 0.1
    assert shares["ours"]["share_of_create_bind_status"] == 0.2
    assert shares["ours"]["share_of_lifecycle"] == 0.5
    assert shares["kueue"]["pods_per_s"] == 12.5
    assert shares["ours"]["capacity_floor_over_drain"] == 0.5
    assert shares["ours_over_kueue"] == 2.0  # ours drained twice as fast


def test_cpu_is_the_difference_and_rss_the_sampled_peak() -> None:
    got = cpu_and_rss({"a": 1.0, "b": 2.0}, {"a": 4.5, "b": 2.0}, {"a": 120.0})
    assert got == {"a": {"cpu_s": 3.5, "peak_rss_mb": 120.0}, "b": {"cpu_s": 0.0, "peak_rss_mb": 0.0}}


def test_table_has_the_ceilings_then_each_drain_with_its_own_controller() -> None:
    measured = {
        "ceiling": _ceiling(),
        "drains": {"kueue": _drain(20.0, "kueue-controller-manager"), "ours": _drain(10.0, "operator")},
    }
    measured["against_ceiling"] = against_ceiling(measured["ceiling"], measured["drains"])
    lines = table(measured).splitlines()
    assert len(lines) == 7
    assert lines[2].startswith("| ceiling: raw create + bind |")
    assert lines[4].startswith("| ceiling: whole pod lives")
    assert lines[5] == "| kueue | 100 | 250 | 20.0 | 12.5 | 0.05 | 0.1 | 0.25 | 30.5 | 3.0, 1.0 | 90.0, 70.0 |"
    assert lines[6].startswith("| ours | 100 | 250 | 10.0 | 25.0 | 0.1 | 0.2 | 0.5 |")


def test_a_run_from_before_the_lifecycle_ceiling_still_reads() -> None:
    ceiling = {k: v for k, v in _ceiling().items() if k != "lifecycle"}
    measured = {"ceiling": ceiling, "drains": {"ours": _drain(10.0, "operator")}}
    measured["against_ceiling"] = against_ceiling(ceiling, measured["drains"])
    assert "share_of_lifecycle" not in measured["against_ceiling"]["ours"]
    lines = table(measured).splitlines()
    assert len(lines) == 5
    assert lines[4].startswith("| ours | 100 | 250 | 10.0 | 25.0 | 0.1 | 0.2 | - |")


def test_both_sides_get_the_same_jobs_in_the_same_queues() -> None:
    jobs = shapes(50, 7, (1.0, 10.0), seed=3)
    assert jobs == shapes(50, 7, (1.0, 10.0), seed=3)
    for i, shape in enumerate(jobs):
        tp, dp, queue, run_s = shape
        kueue, ours = indexed_job(f"f{i}", shape), parallel_job(f"f{i}", shape)
        assert kueue["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ours["spec"]["queue"] == f"q{queue:04d}"
        assert kueue["spec"]["parallelism"] == kueue["spec"]["completions"] == dp == ours["spec"]["parallelism"]["data"]
        assert ours["spec"]["parallelism"]["tensor"] == tp
        assert 1.0 <= run_s <= 10.0


def test_cluster_queues_share_the_gpus_in_cohorts_each_with_a_local_queue() -> None:
    objects = flow_kueue_objects(25, 800)
    kinds = [body["kind"] for _, body in objects]
    assert kinds == ["ResourceFlavor"] + ["ClusterQueue"] * 25 + ["LocalQueue"] * 25
    queues = [body for _, body in objects if body["kind"] == "ClusterQueue"]
    assert {q["spec"]["cohortName"] for q in queues} == {"cohort-000", "cohort-001", "cohort-002"}
    assert sum(q["spec"]["cohortName"] == "cohort-000" for q in queues) == COHORT_SIZE
    quota = queues[0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert quota == "32"


def test_ceiling_pods_are_left_to_the_raw_client() -> None:
    pod = pod_manifest("p")
    assert pod["spec"]["schedulerName"] not in ("default-scheduler", "")
    assert "annotations" not in pod["metadata"]  # kwok runs it until it is deleted
    assert pod_manifest("p", ends_at_once=True)["metadata"]["annotations"] == {COMPLETE_AFTER_ANNOTATION: "0s"}
    assert binding("p", "n1")["target"] == {"kind": "Node", "name": "n1"}


def test_a_gang_is_whole_again_only_with_every_pod_bound_off_the_failed_node() -> None:
    from paralleljob.devtools.bench_kueue_repair import whole
    from paralleljob.devtools.native_set import Gang

    gang = Gang("g", 8, 2, 2, "seed")
    assert whole({"a": "n1", "b": "n2", "c": "n3", "d": "n4"}, gang, "n9")
    assert not whole({"a": "n1", "b": "n2", "c": "n3", "d": "n4"}, gang, "n4")  # still on the failed node
    assert not whole({"a": "n1", "b": "n2", "c": "n3", "d": None}, gang, "n9")  # replacement not bound
    assert not whole({"a": "n1", "b": "n2", "c": "n3"}, gang, "n9")  # replacement not made yet


def test_repair_summary_takes_medians_over_the_repaired_samples_only() -> None:
    from paralleljob.devtools.bench_kueue_repair import summary

    rows = [
        {"whole_again_s": 10.0, "pods_restarted": 1},
        {"whole_again_s": None},
        {"whole_again_s": 12.0, "pods_restarted": 1},
        {"whole_again_s": 11.0, "pods_restarted": 4},
    ]
    got = summary(rows)
    assert got["repaired"] == "3/4"
    assert got["median_whole_again_s"] == 11.0
    assert got["median_pods_restarted"] == 1.0
    assert summary([{"whole_again_s": None}])["median_whole_again_s"] is None


def test_repair_table_has_a_row_per_side_with_the_cost_of_a_repaired_sample() -> None:
    from paralleljob.devtools.bench_kueue_repair import summary
    from paralleljob.devtools.flow_report import repair_table

    repaired = {"whole_again_s": 10.3, "pods_restarted": 1, "comm_ms_before": 2800.4, "comm_ms_after": 2900.1}
    restarted = {**repaired, "pods_restarted": 4}
    sides = {"ours": summary([{"whole_again_s": None}]), "kueue-whole-restart": summary([restarted])}
    got = repair_table({"kueue": summary([repaired]), **sides}).splitlines()
    assert got[2] == "| kueue | idle | 1/1 | 10.3 | 1 | 2800.4 -> 2900.1 | - |"
    assert got[3] == "| kueue-whole-restart | idle | 1/1 | 10.3 | 4 | 2800.4 -> 2900.1 | - |"
    assert got[4] == "| ours | idle | 0/1 | None | None | - | - |"


def test_repair_table_gives_each_side_in_a_wave_a_row_under_its_idle_one() -> None:
    from paralleljob.devtools.bench_kueue_repair import summary
    from paralleljob.devtools.flow_report import repair_table

    quiet = {"whole_again_s": 0.3, "pods_restarted": 1, "comm_ms_before": 1.0, "comm_ms_after": 1.0}
    wave = [
        {**quiet, "whole_again_s": s, "wave_pods_bound_at_failure": at, "wave_pods_bound_when_whole": when,
         "wave_pods_bound": 1600, "wave_bound_s": total}
        for s, at, when, total in ((1.5, 100, 300, 9.0), (2.5, 120, 500, 11.0), (1.0, 90, 200, 10.0))
    ]  # fmt: skip
    measured = {"ours": summary([quiet]), "in_wave": {"gangs": 40, "pods_per_gang": 40, "ours": summary(wave)}}
    got = repair_table(measured).splitlines()
    assert got[2] == "| ours | idle | 1/1 | 0.3 | 1 | 1.0 -> 1.0 | - |"
    assert got[3] == "| ours | wave of 40 x 40 | 3/3 | 1.5 | 1 | 1.0 -> 1.0 | 100 / 300 / 1600 (10.0) |"
    assert len(got) == 4


def test_a_repair_wave_is_named_afresh_each_sample_and_must_leave_room_for_the_repair() -> None:
    import asyncio

    from paralleljob.devtools.bench_kueue_repair import repair, wave_gangs

    first, second = wave_gangs(2, 40, 0), wave_gangs(2, 40, 1)
    assert [g.name for g in first] == ["wave00-000", "wave00-001"]
    assert not {g.name for g in first} & {g.name for g in second}
    assert all((g.tp, g.pp, g.dp) == (1, 1, 40) for g in first)
    with pytest.raises(ValueError, match="no room for the repair"):  # 10 nodes: 80 GPUs, the gang 32 + 8
        asyncio.run(repair(None, 10, 1, 2, 21))  # type: ignore[arg-type]


def test_a_drain_stopped_at_its_limit_counts_what_finished_and_bounds_the_ratio() -> None:
    stopped = _drain(40.0, "kueue-controller-manager") | {
        "finished_jobs": 25, "finished_pods": 60, "stopped_at_limit": True
    }  # fmt: skip
    measured = {"ceiling": _ceiling(), "drains": {"kueue": stopped, "ours": _drain(10.0, "operator")}}
    shares = against_ceiling(measured["ceiling"], measured["drains"])
    assert shares["kueue"]["pods_per_s"] == 1.5
    assert shares["kueue"]["jobs_per_s"] == 0.62
    assert "ours_over_kueue" not in shares
    assert shares["ours_over_kueue_at_least"] == 4.0
    measured["against_ceiling"] = shares
    assert "| kueue | 25 of 100 (stopped) | 60 of 250 (stopped) | 40.0 |" in table(measured)
    shares = against_ceiling(_ceiling(), {"kueue": _drain(10.0, "k"), "ours": stopped})
    assert shares["ours_over_kueue_at_most"] == 0.25


OPERATOR_METRICS = """# HELP paralleljob_reconcile_pass_duration_seconds One reconcile pass
paralleljob_reconcile_pass_duration_seconds_bucket{le="0.1"} 3.0
paralleljob_reconcile_pass_duration_seconds_count 10.0
paralleljob_reconcile_pass_duration_seconds_sum 2.5
paralleljob_list_duration_seconds_count{kind="job"} 2.0
paralleljob_list_duration_seconds_count{kind="pod"} 1.0
paralleljob_list_duration_seconds_sum{kind="job"} 3.0
paralleljob_api_requests_total{code="200",resource="pods",verb="POST"} 40.0
paralleljob_api_requests_total{code="409",resource="paralleljobs",verb="PATCH"} 2.0
paralleljob_api_requests_created{code="200",resource="pods",verb="POST"} 1.7e9
paralleljob_api_requests_waiting{lane="urgent"} 5.0
paralleljob_api_requests_waiting{lane="background"} 7.0
"""

APISERVER_METRICS = """apiserver_request_total{code="201",component="apiserver",resource="pods",verb="POST"} 100
apiserver_request_total{code="200",component="apiserver",resource="pods",verb="LIST"} 4
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",verb="POST",le="0.1"} 90
apiserver_request_duration_seconds_count{component="apiserver",resource="pods",verb="POST"} 100
apiserver_request_duration_seconds_sum{component="apiserver",resource="pods",verb="POST"} 2
apiserver_request_duration_seconds_count{component="apiserver",resource="nodes",verb="POST"} 100
apiserver_request_duration_seconds_sum{component="apiserver",resource="nodes",verb="POST"} 4
apiserver_request_duration_seconds_count{component="apiserver",resource="pods",verb="LIST"} 4
apiserver_request_duration_seconds_sum{component="apiserver",resource="pods",verb="LIST"} 8
apiserver_longrunning_requests{component="apiserver",resource="pods",verb="WATCH"} 6
apiserver_longrunning_requests{component="apiserver",resource="pods",verb="CONNECT"} 1
apiserver_watch_events_total{group="",kind="Pod",version="v1"} 500
apiserver_watch_events_total{group="",resource="pods",version="v1"} 20
apiserver_watch_events_total{group="batch",resource="jobs",version="v1"} 7
""" + "".join(
    f'apiserver_flowcontrol_request_wait_duration_seconds_{part}{{execute="{run}",flow_schema="{schema}",'
    f'priority_level="{level}"}} {value}\n'
    for part, run, schema, level, value in (
        ("count", "true", "global-default", "global-default", 30),
        ("sum", "true", "global-default", "global-default", 1.5),
        ("count", "false", "global-default", "global-default", 2),
        ("sum", "false", "global-default", "global-default", 0.5),
        ("count", "true", "kube-scheduler", "workload-high", 10),
        ("sum", "true", "kube-scheduler", "workload-high", 0.1),
    )
)


def test_metric_sum_adds_every_series_of_a_name_and_no_other_name() -> None:
    from paralleljob.devtools.flow_report import metric_sum

    assert metric_sum(OPERATOR_METRICS, "paralleljob_api_requests_total") == 42.0  # not the _created series
    assert metric_sum(OPERATOR_METRICS, 'paralleljob_api_requests_waiting{lane="urgent"}') == 5.0
    assert metric_sum(OPERATOR_METRICS, "paralleljob_list_duration_seconds_count") == 3.0
    assert metric_sum(OPERATOR_METRICS, "paralleljob_reconcile_pass_duration_seconds") == 0.0  # a prefix only
    assert metric_sum("", "anything") == 0.0


def test_a_progress_point_reads_the_operators_passes_and_the_api_servers_latency_by_verb() -> None:
    from paralleljob.devtools.flow_report import apiserver_point, operator_point

    op = operator_point(OPERATOR_METRICS)
    assert (op["passes"], op["pass_s"], op["lists"], op["list_s"], op["requests"]) == (10.0, 2.5, 3.0, 3.0, 42.0)
    assert (op["urgent_waiting"], op["background_waiting"], op["gc_s"]) == (5.0, 7.0, 0.0)
    api = apiserver_point(APISERVER_METRICS)
    assert api["requests"] == 104.0
    assert api["by_verb"] == {"LIST": [4.0, 8.0], "POST": [200.0, 6.0]}
    assert (api["watchers"], api["watch_events"]) == (6.0, 527.0)
    # older API servers label watch events by kind, newer ones by resource: both are kept apart
    assert api["watch_events_by_resource"] == {"Pod": 500.0, "jobs": 7.0, "pods": 20.0}
    # per priority level, whether the request then ran or was rejected: how many waited and for how long
    assert api["flow_wait"] == {"global-default": [32.0, 2.0], "workload-high": [10.0, 0.1]}


def _point(t: float, done: int, cpu: float, passes: float, pass_s: float, post: tuple[float, float]) -> dict:
    return {
        "t": t,
        "done": done,
        "created": 100,
        "waiting": 100 - done,
        "cpu_s": {"operator": cpu, "kube-apiserver": 2 * cpu},
        "rss_mb": {"operator": 200 + done},
        "operator": {"passes": passes, "pass_s": pass_s, "requests": 10 * done, "lists": 0, "list_s": 0, "gc_s": 0},
        "apiserver": {"requests": 20 * done, "by_verb": {"POST": list(post)}, "watch_events": 0.0},
    }


def test_windows_give_each_interval_its_rate_cpu_cores_and_mean_pass() -> None:
    from paralleljob.devtools.flow_report import progress_table, windows

    points = [
        _point(0.0, 0, 0.0, 0, 0.0, (0, 0.0)),
        _point(30.0, 60, 15.0, 100, 5.0, (100, 1.0)),
        _point(60.0, 75, 45.0, 150, 15.0, (150, 2.0)),
    ]
    first, second = windows(points)
    assert (first["from_s"], first["to_s"], first["done"], first["jobs_per_s"]) == (0, 30, 60, 2.0)
    assert first["cores"] == {"operator": 0.5, "kube-apiserver": 1.0}
    assert (first["passes"], first["pass_ms"], first["api_ms"]) == (100, 50, {"POST": 10.0})
    assert (second["jobs_per_s"], second["pass_ms"], second["cores"]["operator"]) == (0.5, 200, 1.0)
    assert second["api_ms"] == {"POST": 20.0}
    assert second["operator_requests_per_s"] == 5.0
    whole = windows(points, step=5)  # wider than the series: one window, first point to last
    assert len(whole) == 1 and whole[0]["jobs_per_s"] == 1.25 and whole[0]["pass_ms"] == 100
    assert windows(points[:1]) == []
    lines = progress_table(points).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| 0-30 | 60 | 2.0 | 40 | 100, 50 | 0.50, 1.00 | 260 |")


def test_a_window_without_the_operators_metrics_still_has_its_rate() -> None:
    from paralleljob.devtools.flow_report import progress_table, windows

    a, b = _point(0.0, 0, 0.0, 0, 0.0, (0, 0.0)), _point(30.0, 30, 3.0, 10, 1.0, (10, 0.1))
    b["operator"], b["apiserver"] = {}, {}
    (row,) = windows([a, b])
    assert row["jobs_per_s"] == 1.0 and "pass_ms" not in row and "api_ms" not in row
    assert progress_table([a, b]).splitlines()[2].endswith("| 230 | - | - | - |")


def test_flow_sides_drain_one_side_and_an_ours_only_drain_needs_no_kueue() -> None:
    from paralleljob.devtools.bench_kueue_parts import controllers_needed, drain_order

    assert drain_order("kueue", "both") == ("kueue", "ours")
    assert drain_order("ours", "both") == ("ours", "kueue")
    assert drain_order("kueue", "ours") == ("ours",)
    assert controllers_needed({"throughput"}, "ours") == ()
    assert controllers_needed({"throughput", "repair"}, "ours") == ("jobset", "kueue")
    assert controllers_needed({"throughput"}, "both") == ("jobset", "kueue")
    assert controllers_needed({"ceiling"}, "ours") == ()


def test_each_progress_point_is_appended_to_its_file_as_it_is_taken(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    import asyncio
    import json
    import os

    from paralleljob.devtools import bench_flow, requestmix
    from paralleljob.devtools.operatorproc import OperatorMetrics

    class Operator(OperatorMetrics):
        def metrics(self) -> str:
            return OPERATOR_METRICS

    monkeypatch.setattr(requestmix, "apiserver_metrics", lambda kubeconfig: APISERVER_METRICS)
    series = tmp_path / "series.jsonl"
    progress = bench_flow.Progress(tmp_path / "kubeconfig", {"operator": os.getpid()}, Operator(), series)
    progress.begin()
    asyncio.run(progress.take(0, 0, 0, at=0.0))
    asyncio.run(progress.take(5, 10, 5))
    lines = [json.loads(line) for line in series.read_text().splitlines()]
    assert lines == progress.points and len(lines) == 2
    assert lines[0]["t"] == 0.0 and lines[1]["done"] == 5 and lines[1]["created"] == 10
    assert lines[1]["operator"]["passes"] == 10.0 and lines[1]["apiserver"]["requests"] == 104.0
    assert lines[1]["cpu_s"]["operator"] >= 0.0 and lines[1]["rss_mb"]["operator"] > 0


def test_a_race_stops_the_second_side_at_the_first_sides_drain_time_and_needs_a_finished_first() -> None:
    from types import SimpleNamespace

    from paralleljob.devtools.bench_kueue_parts import _race_limit

    finished = {"ours": {"drain_s": 2000.0, "stopped_at_limit": False}}
    assert _race_limit(SimpleNamespace(flow_race=1.0), finished) == 2000.0
    assert _race_limit(SimpleNamespace(flow_race=1.5), finished) == 3000.0
    assert _race_limit(SimpleNamespace(flow_race=1.0), {}) is None  # the first side: no limit of its own
    assert _race_limit(SimpleNamespace(flow_race=0.0), finished) is None
    stopped = {"ours": {"drain_s": 3000.0, "stopped_at_limit": True}}
    assert _race_limit(SimpleNamespace(flow_race=1.0), stopped) is None


def test_the_lifecycle_ceiling_counts_a_pod_once_it_is_seen_succeeded() -> None:
    from paralleljob.devtools.bench_ceiling import Succeeded

    seen = Succeeded(kube=None)  # no request is made: the events are fed by hand

    def pod(name: str, phase: str) -> dict:
        return {"metadata": {"name": name}, "status": {"phase": phase}}

    seen.relisted([pod("a", "Running"), pod("b", "Succeeded")])
    seen.on_event({"type": "MODIFIED", "object": pod("a", "Running")})
    assert seen.names == {"b"}
    seen.on_event({"type": "MODIFIED", "object": pod("a", "Succeeded")})
    seen.on_event({"type": "DELETED", "object": pod("c", "Succeeded")})  # gone, never seen finishing here
    assert seen.names == {"a", "b"}
    assert seen.changed.is_set()


def test_a_kueue_job_is_done_when_first_seen_complete_and_keeps_that_time() -> None:
    from paralleljob.devtools.bench_flow import BatchJobTracker

    tracker = BatchJobTracker(kube=None)  # no request is made: the events are fed by hand

    def job(name: str, complete: str) -> dict:
        return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Complete", "status": complete}]}}

    tracker.relisted([job("a", "False"), job("b", "True")])
    first = tracker.done_at["b"]
    tracker.on_event({"type": "MODIFIED", "object": job("b", "True")})
    tracker.on_event({"type": "DELETED", "object": job("c", "True")})
    assert tracker.done_at == {"b": first}
    tracker.on_event({"type": "ADDED", "object": job("a", "True")})
    assert set(tracker.done_at) == {"a", "b"}


def test_fresh_clusters_give_each_side_its_own_with_only_its_controllers() -> None:
    from paralleljob.devtools.bench_kueue_parts import Stage, cluster_stages

    parts = {"ceiling", "throughput", "repair"}
    shared = cluster_stages(parts, ("ours", "kueue"), fresh=False)
    assert shared == [Stage(frozenset(parts), ("ours", "kueue"), ("jobset", "kueue"), operator=True)]
    first, second, repair = cluster_stages(parts, ("ours", "kueue"), fresh=True)
    assert first == Stage(frozenset({"ceiling", "throughput"}), ("ours",), (), operator=True)
    assert second == Stage(frozenset({"throughput"}), ("kueue",), ("jobset", "kueue"), operator=False)
    assert repair == Stage(frozenset({"repair"}), (), ("jobset", "kueue"), operator=True)
    kueue_first = cluster_stages({"throughput"}, ("kueue", "ours"), fresh=True)
    assert [(s.order, s.operator, s.controllers) for s in kueue_first] == [
        (("kueue",), False, ("jobset", "kueue")),
        (("ours",), True, ()),
    ]
    # one side only, or no drain at all: one cluster whatever was asked
    assert len(cluster_stages({"throughput"}, ("ours",), fresh=True)) == 1
    assert len(cluster_stages({"ceiling", "repair"}, ("kueue", "ours"), fresh=True)) == 1


def test_a_run_over_fresh_clusters_reads_as_one(monkeypatch: MonkeyPatch) -> None:
    import argparse
    from types import SimpleNamespace

    from paralleljob.bench_kueue_args import add_kueue_arguments
    from paralleljob.devtools import bench_kueue_parts

    parser = argparse.ArgumentParser()
    add_kueue_arguments(parser)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drain-timeout", type=float, default=100.0)
    parser.add_argument("--creators", type=int, default=8)
    args = parser.parse_args(["--kueue-parts", "ceiling,throughput", "--flow-clusters", "fresh"])
    brought_up: list[tuple[str, tuple[str, ...]]] = []
    ceiling = {"create_bind": {"pods_per_s": 100.0}, "create_bind_status": {"pods_per_s": 50.0}}

    def up(name: str, shape: object, controllers: tuple[str, ...] = (), **_: object) -> SimpleNamespace:
        brought_up.append((name, controllers))
        return SimpleNamespace(name=name)

    async def measure(cluster, args, stage, drained):  # type: ignore[no-untyped-def]
        assert set(drained) == set(stage_sides_before), "each stage sees the drains of those before it"
        who = stage.order[0]
        stage_sides_before.append(who)
        out = {"load_average_start": [float(len(brought_up))], "operator_starts": int(stage.operator)}
        out["drains"] = {who: {"drain_s": 10.0 if who == "ours" else 20.0, "jobs": 5, "pods": 10}}
        if "ceiling" in stage.parts:
            out["ceiling"] = ceiling
        return {**out, "load_average_end": [float(len(brought_up))]}

    stage_sides_before: list[str] = []
    monkeypatch.setattr(bench_kueue_parts, "up", up)
    monkeypatch.setattr(bench_kueue_parts, "down", lambda name: None)
    monkeypatch.setattr(bench_kueue_parts, "measure", measure)
    result = bench_kueue_parts.run_parts(args, {"ceiling", "throughput"})
    assert [controllers for _, controllers in brought_up] == [("jobset", "kueue"), ()]  # Kueue first by default
    assert len({name for name, _ in brought_up}) == 2
    assert result["clusters"] == "one per side" and len(result["cluster_up_s"]) == 2
    assert set(result["drains"]) == {"kueue", "ours"} and result["ceiling"] == ceiling
    assert result["load_average_start"] == [1.0] and result["load_average_end"] == [2.0]
    assert result["operator_starts"] == 1
    assert result["against_ceiling"]["ours_over_kueue"] == 2.0
    assert result["command"].endswith("--flow-clusters fresh")

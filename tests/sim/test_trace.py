"""Trace input: the generic CSV, the Alibaba 2023 adapter, and shapes from GPU counts (SPEC section 8)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from paralleljob.sim.workload.alibaba import read_node_list, read_pods
from paralleljob.sim.workload.trace import TraceError, TraceJob, read_generic, shape_for


@pytest.mark.parametrize(
    ("gpus", "shape"),
    [(16, (8, 2, 1)), (64, (8, 8, 1)), (96, (8, 6, 2)), (1024, (8, 8, 16)), (136, (8, 1, 17)), (12, (6, 1, 2))],
)
def test_shapes_of_multi_node_jobs(gpus: int, shape: tuple[int, int, int]) -> None:
    assert shape_for(gpus, random.Random(0)) == shape


def test_small_jobs_are_tp_or_dp_by_a_seeded_coin() -> None:
    shapes = {shape_for(4, random.Random(seed)) for seed in range(40)}
    assert shapes == {(4, 1, 1), (1, 1, 4)}
    job = TraceJob("j", 0, 1, 4)
    assert job.spec(7) == job.spec(7), "the same seed gives the same shape"


def test_generic_trace_with_and_without_shapes(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("submit_s,duration_s,num_gpus,tenant,tp,pp,dp\n5,10,16,a,4,2,2\n1,3,2,,,,\n")
    jobs = read_generic(path)
    assert [j.submit_s for j in jobs] == [1.0, 5.0]  # sorted by submit time
    assert jobs[0].shape is None and jobs[0].tenant == "default"
    assert jobs[1].shape == (4, 2, 2) and jobs[1].tenant == "a"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("submit_s,duration_s\n1,2\n", "missing column"),
        ("submit_s,duration_s,num_gpus\n1,x,2\n", "t.csv:2: duration_s must be a number"),
        ("submit_s,duration_s,num_gpus\n1,2,0\n", "num_gpus must be a whole number >= 1"),
        ("submit_s,duration_s,num_gpus,tp,pp,dp\n1,2,8,2,2,1\n", "tp\\*pp\\*dp = 4 but num_gpus = 8"),
        ("submit_s,duration_s,num_gpus\n1,2,4\n3,4\n", "t.csv:3: 2 field\\(s\\), but the header has 3"),
        ("submit_s,duration_s,num_gpus\n1,2,4,9\n", "t.csv:2: 4 field\\(s\\), but the header has 3"),
        ("submit_s,duration_s,num_gpus\n", "no jobs \\(only a header\\)"),
    ],
)
def test_bad_generic_traces_name_the_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(body)
    with pytest.raises(TraceError, match=message):
        read_generic(path)


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffsubmit_s,duration_s,num_gpus\n1,2,4\n".encode())
    assert [(j.submit_s, j.num_gpus) for j in read_generic(path)] == [(1.0, 4)]


def test_alibaba_adapter_refuses_short_rows_and_empty_files(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    header = "name,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time"
    path.write_text("\ufeff" + header + "\n")
    with pytest.raises(TraceError, match="no pod with a GPU"):
        read_pods(path)
    path.write_text(header + "\np,1,1000,0,5\n")
    with pytest.raises(TraceError, match=r"pods\.csv:2: 5 field"):
        read_pods(path)


def test_alibaba_adapter_rules(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
    )
    rows = [
        "shared,1,1,1,460,,BE,Running,10,110,20",  # a share of a GPU: one whole GPU, runs 20..110
        "cpu-only,1,1,0,0,,LS,Running,0,50,0",  # no GPU: skipped
        "never,1,1,2,1000,,LS,Pending,30,90,",  # never scheduled: duration from creation
        "open,1,1,1,1000,,LS,Running,5,,5",  # no end: dropped
        "eight,1,1,8,1000,,Burstable,Running,0,40,0",
    ]
    path.write_text("\n".join([header, *rows]) + "\n")
    jobs = {j.job_id: j for j in read_pods(path)}
    assert sorted(jobs) == ["eight", "never", "shared"]
    assert (jobs["shared"].num_gpus, jobs["shared"].submit_s, jobs["shared"].duration_s) == (1, 10.0, 90.0)
    assert (jobs["never"].num_gpus, jobs["never"].duration_s) == (2, 60.0)
    assert jobs["eight"].tenant == "Burstable"


def test_the_real_alibaba_trace_and_node_list(traces: Path) -> None:
    jobs = read_pods(traces / "alibaba2023_openb_pods.csv")
    assert len(jobs) == 7064  # 8,152 pods less 1,088 without GPUs; every pod has an end
    assert {j.num_gpus for j in jobs} == {1, 2, 4, 8}
    topology = read_node_list(traces / "alibaba2023_openb_gpu_nodes.csv")
    assert (topology.num_nodes, topology.num_gpus) == (1213, 6212)
    assert sorted(set(topology.node_gpu_count)) == [1, 2, 4, 8]

"""3D-parallel workloads: published layouts overlaid on a trace, the mixed workload, spine oversubscription."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paralleljob.cli import main
from paralleljob.sim.cluster.clusters import oversubscribed
from paralleljob.sim.workload.overlay import PUBLISHED_LAYOUTS, mixed_workload, overlay_3d, scaled
from paralleljob.sim.workload.trace import TraceJob


def test_published_layouts_are_whole_and_scale_down_by_data_parallelism() -> None:
    for layout in PUBLISHED_LAYOUTS:
        assert layout.dp * layout.tp * layout.pp == layout.gpus, layout.name
    llama = next(lay for lay in PUBLISHED_LAYOUTS if lay.name == "llama3-405b")
    assert (llama.tp, llama.pp, llama.dp) == (8, 16, 64)
    assert scaled(llama, 1024) == (8, 16, 8)
    assert scaled(llama, 100) is None  # one replica (128 GPUs) does not fit


def test_overlay_keeps_arrivals_and_is_seeded_per_job() -> None:
    trace = [TraceJob(f"j{i}", float(i), 100.0, 1) for i in range(400)]
    mixed = overlay_3d(trace, 0.25, 512, seed=1)
    assert [j.submit_s for j in mixed] == [j.submit_s for j in trace]
    big = [j for j in mixed if j.shape is not None]
    assert 60 < len(big) < 140 and all(j.num_gpus <= 512 and j.model is not None for j in big)
    assert overlay_3d(trace, 0.25, 512, seed=1) == mixed
    assert overlay_3d(trace[:100], 0.25, 512, seed=1) == mixed[:100]  # a slice does not change a job
    assert overlay_3d(trace, 0.0, 512, seed=1) == trace


def test_mixed_workload_offers_the_asked_load() -> None:
    jobs = mixed_workload(3000, 1024, seed=2, load=0.7)
    work = sum(j.duration_s * j.num_gpus for j in jobs)
    period = jobs[-1].submit_s
    assert work / (1024 * period) == pytest.approx(0.7, rel=0.1)
    large = [j for j in jobs if j.tenant == "llm"]
    assert 0.07 < len(large) / len(jobs) < 0.13
    assert all(j.shape is not None and j.shape[0] * j.shape[1] * j.shape[2] == j.num_gpus for j in jobs)
    assert mixed_workload(3000, 1024, seed=2, load=0.7) == jobs


def test_oversubscription_divides_the_levels_above_the_leaf() -> None:
    assert oversubscribed("rack:32:50,spine:512:50", 7.0) == f"rack:32:50.0,spine:512:{50 / 7!r}"
    assert oversubscribed("rack:32:50", 1.0) == "rack:32:50"
    with pytest.raises(ValueError, match="needs --levels"):
        oversubscribed("", 7.0)
    with pytest.raises(ValueError, match=">= 1"):
        oversubscribed("rack:32:50", 0.5)


def test_mixed_workload_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "o"
    args = ["simulate", "--workload", "mixed", "--workload-jobs", "150", "--nodes", "32",
            "--levels", "rack:8:50", "--oversubscription", "4", "--compare", "ours,first-fit",
            "--cost-model", "megatron", "--no-plots", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["cluster"]["levels"] == ["node@600GB/s", "rack@50GB/s", "cluster@12.5GB/s"]
    assert metrics["trace"]["format"] == "synthetic mixed" and metrics["trace"]["jobs"] == 150
    ours, first = metrics["policies"]["ours"], metrics["policies"]["first-fit"]
    assert ours["tp_groups_across_nodes"] == 0 < first["tp_groups_across_nodes"]
    assert ours["jct_s"]["mean"] < first["jct_s"]["mean"]


def test_several_seeds_give_intervals_and_ratios(tmp_path: Path) -> None:
    from paralleljob.sim.report.compare import mean_ci, t95

    assert mean_ci([1.0, 3.0]) == {"mean": 2.0, "ci95": pytest.approx(12.706), "n": 2}
    assert mean_ci([5.0]) == {"mean": 5.0, "ci95": None, "n": 1}
    assert t95(100) == 1.96
    out = tmp_path / "o"
    args = ["simulate", "--workload", "mixed", "--workload-jobs", "60", "--nodes", "16", "--levels", "rack:4:50",
            "--compare", "ours,best-fit,volcano", "--seeds", "3", "--seed", "5", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["seeds"] == [5, 6, 7] and sorted(metrics["per_seed"]) == ["5", "6", "7"]
    assert metrics["summary"]["ours"]["jct_mean_s"]["n"] == 3
    assert set(metrics["ratios"]["ours"]) == {"best-fit", "volcano"}
    report = (out / "report.md").read_text()
    assert "## Over 3 seeds (5, 6, 7)" in report and "| ours / best-fit |" in report
    assert (out / "ratios.png").read_bytes()[:4] == b"\x89PNG"


def test_synth_creates_the_folder_it_writes_into(tmp_path: Path) -> None:
    # Walking docs/simulator.md on a fresh checkout: `--out sim-out/synth-100k.csv` failed with a traceback
    # when sim-out/ did not exist yet.
    from paralleljob.sim.workload.synth import main as synth_main

    pods = tmp_path / "pods.csv"
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
    )
    rows = [f"p{i},1000,1024,{1 + i % 8},1000,,LS,Running,{i * 600},{i * 600 + 3600},{i * 600}" for i in range(50)]
    pods.write_text("\n".join([header, *rows]) + "\n")
    out = tmp_path / "not-yet" / "synth.csv"
    assert synth_main(["--pods", str(pods), "--jobs", "200", "--cluster-gpus", "64", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("submit_s,") and len(lines) > 100

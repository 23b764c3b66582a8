"""`paralleljob simulate` on GB200 NVL72 racks: the LLM workload with TP8/TP16, ours against the peers'
"TP group in one clique, otherwise best-fit", with and without warm spares, failures and repairs included."""

from __future__ import annotations

import json
from pathlib import Path

from paralleljob.cli import main
from paralleljob.core import ClusterState, JobSpec, cost_model
from paralleljob.core.nvl72.cliquebaseline import CliqueBestFitPlacer
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.sim.workload.llmnvl import llm_nvl72_workload

POLICIES = "ours-nvl72,clique-best-fit,ours-nvl72-spares2,clique-best-fit-spares2"


def test_the_baseline_keeps_each_tp_group_in_one_clique_on_whole_trays() -> None:
    state = ClusterState(nvl72_topology(3))
    topo = state.topology
    placement = CliqueBestFitPlacer(state, spares=2).place(JobSpec("j", 16, 4, 2, 10.0), cost_model("seed"))
    for group in placement.groups:
        trays = {topo.gpu_node[g] for g in group}
        assert len(trays) == 4 and len({topo.domain_of[1][n] for n in trays}) == 1
    per_clique: dict[int, int] = {}
    for n in {topo.gpu_node[g] for g in placement.gpus}:
        per_clique[topo.domain_of[1][n]] = per_clique.get(topo.domain_of[1][n], 0) + 1
    assert max(per_clique.values()) <= 16  # 2 spares of 18 left in every clique


def test_the_llm_workload_is_tp8_and_tp16_for_its_llm_jobs() -> None:
    jobs = llm_nvl72_workload(200, 576, seed=1)
    llm = [j for j in jobs if j.tenant == "llm"]
    assert llm and {j.shape[0] for j in llm if j.shape} == {8, 16}
    assert all(j.num_gpus <= 144 for j in llm)


def test_simulate_nvl72_racks_with_all_four_policies(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(
        ["simulate", "--workload", "llm-nvl72", "--workload-jobs", "60", "--nvl72-racks", "4", "--compare", POLICIES,
         "--failures", "300", "--failure-stats", str(traces / "failure_stats.csv"), "--out", str(out), "--no-plots",
         "--check-invariants"]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["cluster"]["levels"][:2] == ["node@900GB/s", "clique@900GB/s"]
    for name in POLICIES.split(","):
        result = metrics["policies"][name]
        jobs = result["jobs"]
        assert jobs["unfinished"] == 0 and jobs["completed"] + jobs["failed"] == 60, name  # failed: maxRestarts
        assert result["failures"]["injected"] > 0, name

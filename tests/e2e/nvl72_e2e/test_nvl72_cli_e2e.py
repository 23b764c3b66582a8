"""``paralleljob status`` and ``describe`` on the mixed HGX + NVL72 cluster, as issue 38 walked it: a
TP8xPP4xDP2 job (64 GPUs: more than the 4 HGX nodes hold) on 16 whole trays is described tray by tray, with
its clique and the replica and stage of its ranks, at 80 columns without a broken name; the map draws the HGX
nodes in one table per leaf and the trays in one per clique."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pjhelpers import Jobs
from tests.e2e.surfaces import paralleljob_cli

from paralleljob.devcluster.cluster import DevCluster

pytestmark = pytest.mark.e2e


def cli(kubeconfig: Path, columns: int, *args: str) -> str:
    return paralleljob_cli(kubeconfig, *args, columns=columns)


def test_status_and_describe_show_a_tray_job_and_group_hgx_nodes_by_leaf(
    nvl72_pjs: Jobs, nvl72_cluster: DevCluster
) -> None:
    pjs, kubeconfig = nvl72_pjs, nvl72_cluster.kubeconfig
    pjs.create("big", 8, 4, 2)
    status = pjs.wait_phase("big", "Running", timeout_s=120)
    assert status["placement"].get("layout") == "trays" and len(status["placement"]["pods"]) == 16
    key = f"{pjs.namespace}/big"
    order = status["placement"]["rankOrder"]

    described: dict[str, Any] = json.loads(cli(kubeconfig, 200, "describe", key, "-o", "json"))
    record = {p["name"]: p for p in status["placement"]["pods"]}
    assert sorted(p["name"] for p in described["pods"]) == sorted(record)
    for line in described["pods"]:
        slot = record[line["name"]]
        assert line["clique"] == slot["clique"] and line["ranks"] == slot["ranks"]
        group = slot["nodeRank"] // 2  # TP8 over trays of 4: two trays per TP group
        replica, stage = (group % 2, group // 2) if order == "tp-dp-pp" else (group // 4, group % 4)
        assert line["groups"] == [[replica, stage]], (order, line)

    narrow = cli(kubeconfig, 80, "describe", key)
    assert max(map(len, narrow.splitlines())) <= 80, narrow
    words = set(re.findall(r"[\w.:-]+", narrow))
    assert set(record) | {p["node"] for p in record.values()} <= words, narrow
    assert {f"clique {i}: {c}" for i, c in enumerate(dict.fromkeys(p["clique"] for p in described["pods"]))} <= set(
        narrow.splitlines()
    ), narrow

    gpu_map: dict[str, Any] = json.loads(cli(kubeconfig, 200, "status", "-o", "json"))
    hgx = [row for row in gpu_map["nodes"] if not row["name"].startswith("gb200")]
    trays = [row for row in gpu_map["nodes"] if row["name"].startswith("gb200")]
    assert hgx and trays
    assert {row["level"] for row in hgx} == {"leaf"} and not any(row["domain"].startswith("~") for row in hgx)
    assert len({row["domain"] for row in hgx}) == 1, "the 4 HGX nodes share one leaf"
    assert {row["level"] for row in trays} == {"clique"} and len({row["domain"] for row in trays}) == 2
    table = cli(kubeconfig, 200, "status")
    assert "~" not in table and table.count("\nleaf ") + table.startswith("leaf ") == 1, table

"""``bench dra``'s tray repairs: the tray victim asks for GB200 trays, and a replacement that left its tray's
clique is counted against the sample (idle and in a wave apart), so that a fast repair to the wrong place
shows in the results."""

from __future__ import annotations

import asyncio
from typing import Any

from paralleljob.devtools.bench_dra import TRAY_VICTIM, _Repairs
from paralleljob.devtools.bench_kit import HGX_VICTIM, Wave
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.computedomain import CLIQUE_LABEL


class _Nodes:
    """Answers ``kube.list`` of nodes as the API server would: each with its clique label, or none (HGX)."""

    def __init__(self, cliques: dict[str, str | None]) -> None:
        self.cliques = cliques

    async def list(self, path: str) -> tuple[list[dict[str, Any]], str]:
        assert path == "/api/v1/nodes"
        items = [
            {"metadata": {"name": name, "labels": {CLIQUE_LABEL: clique} if clique else {}}}
            for name, clique in self.cliques.items()
        ]
        return items, "1"


def test_the_tray_victim_is_a_gb200_tp8_job_of_four_tray_pods() -> None:
    body = TRAY_VICTIM.body()
    body["metadata"]["namespace"] = "bench-tray-repair"
    job = parse_job(body)
    assert job.request is not None
    assert (job.request.spec.tp, job.request.spec.pp, job.request.spec.dp) == (8, 2, 1)
    assert job.request.gpu_product == "NVIDIA-GB200"
    assert TRAY_VICTIM.pods == 16 // 4  # one pod per tray of 4 GPUs
    assert "gpuProduct" not in HGX_VICTIM.body()["spec"]
    assert TRAY_VICTIM.on_trays and not HGX_VICTIM.on_trays


def test_a_replacement_outside_its_trays_clique_is_counted_apart_idle_and_in_a_wave() -> None:
    kube: Any = _Nodes({"tray-a1": "u.1", "tray-a2": "u.1", "tray-b1": "u.2", "hgx-0": None})
    repairs = _Repairs("bench-tray-repair", TRAY_VICTIM)
    same = [{"from": "tray-a1", "to": ["tray-a2"]}]
    other = [{"from": "tray-a1", "to": ["tray-b1"]}]
    hgx = [{"from": "tray-a2", "to": ["hgx-0"]}]
    asyncio.run(repairs._count_clique_changes(kube, ("dra", False), same + other))
    asyncio.run(repairs._count_clique_changes(kube, ("dra", True), hgx))
    repairs.idle["dra"] += [0.1, 0.2]
    repairs.in_wave["dra"] += [0.5]
    summary = repairs.summary("dra", "tray_not_ready_to_rebound", Wave("w", 1, 40))
    assert summary["tray_not_ready_to_rebound"]["replacements_outside_the_clique"] == 1
    assert summary["tray_not_ready_to_rebound_in_wave"]["replacements_outside_the_clique"] == 1
    hgx_repairs = _Repairs("bench-repair")
    hgx_repairs.idle["dra"] += [0.1]
    assert "replacements_outside_the_clique" not in hgx_repairs.summary("dra", "k", None)["k"]


def test_node_repairs_of_hgx_jobs_are_not_checked_for_cliques() -> None:
    kube: Any = _Nodes({})
    repairs = _Repairs("bench-repair")
    asyncio.run(repairs._count_clique_changes(kube, ("dra", False), [{"from": "a", "to": ["b"]}]))
    assert not repairs.cliques_left

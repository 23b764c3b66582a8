"""Moves that free room on HGX nodes, on the real API (issue 40, "HGX racks"): 8 nodes of 8 GPUs in 2 racks
(leaves) of 4. A 2-GPU job runs on every node, so 48 GPUs are free but no node is whole, and a TP8 x DP2 job (two whole
nodes) waits only because the free GPUs are scattered. The operator plans with ``core.moves.plan_moves`` over
the core placer it admits HGX jobs with, moves two of the small jobs (at once: they lost little since they
started) and admits the large job on two nodes of one rack; every small job runs elsewhere, each moved one
saying for whom and what it lost (``tests/k8s/test_hgx_room_moves.py`` is the same on the FakeCluster)."""

from __future__ import annotations

from typing import Any

import pytest
from pjhelpers import Jobs, wait_for

from paralleljob.core.moves import MoveBounds
from paralleljob.devcluster.nodes import LEAF_LABEL
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


def _nodes(status: dict[str, Any]) -> set[str]:
    return set(str(status.get("nodes") or "").split(",")) - {""}


def _rack_of(kube: KubeSession) -> dict[str, str]:
    nodes = kube.run(kube.core.list_node()).items
    return {n.metadata.name: n.metadata.labels[LEAF_LABEL] for n in nodes}


def test_two_gpu_jobs_move_so_a_tp8_dp2_job_gets_two_whole_nodes_of_a_rack(kube: KubeSession, pjs: Jobs) -> None:
    rack_of = _rack_of(kube)
    nodes = sorted(rack_of)
    assert len(nodes) == 8
    # every node whole-taken, then one at a time: freed, a 2-GPU job onto it, its other 6 GPUs padded
    for i in range(len(nodes)):
        pjs.create(f"w{i}", 8, 1, 1)
    for i in range(len(nodes)):
        pjs.wait_phase(f"w{i}", "Running", timeout_s=120)
    small = [f"s{i}" for i in range(len(nodes))]
    for i, name in enumerate(small):
        pjs.delete(f"w{i}")
        wait_for(f"w{i}'s pods gone", lambda i=i: not pjs.pods(f"w{i}"), 120)
        pjs.create(name, 2, 1, 1, checkpoint={"intervalSeconds": 3600})
        pjs.wait_phase(name, "Running", timeout_s=120)
        pjs.create(f"pad{i}", 2, 1, 3)
        pjs.wait_phase(f"pad{i}", "Running", timeout_s=120)
    for i in range(len(nodes)):
        pjs.delete(f"pad{i}")
    wait_for("the pads' pods gone", lambda: not any(pjs.pods(f"pad{i}") for i in range(len(nodes))), 120)
    where = {name: _nodes(pjs.status(name)) for name in small}
    assert sorted(n for ns in where.values() for n in ns) == nodes, where  # one on every node
    pjs.create("big", 8, 1, 2, checkpoint={"intervalSeconds": 3600})
    status = pjs.wait_phase("big", "Running", timeout_s=300)
    big = _nodes(status)
    assert len(big) == 2 and len({rack_of[n] for n in big}) == 1, (big, rack_of)  # two whole nodes, one rack

    def all_running_elsewhere() -> bool:
        statuses = {n: pjs.status(n) for n in small}
        return all(s.get("phase") == "Running" and not _nodes(s) & big for s in statuses.values())

    wait_for("every 2-GPU job Running off the large job's nodes", all_running_elsewhere, 180)
    moved = {n: pjs.status(n) for n in small if "lastRoomMove" in pjs.status(n)}
    assert len(moved) == 2, moved
    for name, moved_status in moved.items():
        last = moved_status["lastRoomMove"]
        assert last["for"].endswith("/big") and last["domain"].startswith("leaf "), last
        assert 0 <= last["lostGpuSeconds"] <= MoveBounds().move_now_max_lost_gpu_s, last
        said = next(c for c in moved_status["conditions"] if c["type"] == "MovedForRoom")
        assert f"lost {last['lostGpuSeconds']:.0f} GPU-seconds" in said["message"], said
        pjs.wait_events(name, {"MovedForRoom"})
    pjs.wait_events("big", {"MovePlanned", "Placed"})
    assert "movePlan" not in pjs.status("big")

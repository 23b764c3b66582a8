"""A cluster without GPU nodes is an empty topology and state, not None: every question on it answers
"nothing here", jobs wait with NoGPUNodes (never refused for good), and they are placed once nodes come."""

from __future__ import annotations

import pytest

from paralleljob.core.admit.queueing import QueuePolicy
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.status.records import PodSlot
from paralleljob.k8s.view.clusterview import build_view
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def test_the_view_of_no_gpu_nodes_is_empty_not_none() -> None:
    view = build_view([], [], [], TopologyConfig())
    assert view.empty and view.topology.num_nodes == 0 and view.topology.max_gpus_per_node == 0
    assert view.state.counts() == {"total": 0, "allocated": 0, "unhealthy": 0, "free": 0}
    assert view.gpu_id("gpu-node-000", 0) is None
    assert view.broken_gpus(PodSlot("p", 0, 0, "gpu-node-000", (0,)))
    assert view.topology.levels[1].name == "cluster"


@pytest.mark.parametrize("policy", [None, QueuePolicy()], ids=["fifo", "queueing pass"])
def test_jobs_wait_for_gpu_nodes_and_are_placed_when_they_come(policy: QueuePolicy | None) -> None:
    fc = FakeCluster([], policy=policy)
    fc.add_job(paralleljob("llama", 4, 2, 1))
    fc.step()
    status = fc.job("ns/llama")["status"]
    assert status["phase"] == "Queued"
    placed = next(c for c in status["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "NoGPUNodes" and fc.last_view is not None and fc.last_view.empty
    fc.nodes.update({f"n{i}": node(f"n{i}") for i in range(2)})
    fc.settle()
    assert fc.phase("ns/llama") == "Running"

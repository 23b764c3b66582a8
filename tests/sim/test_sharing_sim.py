"""The sharing simulation's mechanism on a slice of the Alibaba 2023 pods (sim/run/sharing.py), not its numbers."""

from __future__ import annotations

from pathlib import Path

from paralleljob.core.slices.mig import GPU_80GB
from paralleljob.core.slices.sharing import MpsShare, WholeGpus
from paralleljob.core.topology import Level, NodeSpec, Topology
from paralleljob.sim.run.sharing import request_for, simulate
from paralleljob.sim.workload.alibaba import read_pod_shares
from paralleljob.sim.workload.trace import TraceJob


def small_cluster() -> Topology:
    specs = [NodeSpec(f"n{i}", 8, 80.0, ("cluster",)) for i in range(3)] + [NodeSpec("m0", 2, 80.0, ("cluster",))]
    return Topology.from_nodes(specs, [Level("node", 600.0), Level("cluster", 50.0)])


def test_modes_on_a_slice_of_the_trace(traces: Path) -> None:
    pods = read_pod_shares(traces / "alibaba2023_openb_pods.csv")
    assert sum(milli < 1000 for _, milli in pods) == 3078  # the fractional pods the comparison is about
    # 600 pods from the busy last weeks, with the 8-GPU ones kept, arrivals 20x faster: the 26 GPUs queue
    window = pods[5000:5600]
    runs = {mode: simulate(small_cluster(), window, mode, speedup=20, check=True) for mode in ("whole", "mig", "mps")}
    assert all(r.gpus == 26 and r.broke_whole_node_while_used_fit == 0 for r in runs.values())
    assert runs["whole"].held_allocation == runs["whole"].gpus_in_use  # whole GPUs: held is in use
    assert runs["mps"].held_allocation <= runs["mig"].held_allocation  # a share holds no more than a slice
    for mode in ("mig", "mps"):
        assert runs[mode].compute_allocation >= runs["whole"].compute_allocation
        assert sum(runs[mode].small_wait_s) <= sum(runs["whole"].small_wait_s)


def test_spread_breaks_whole_nodes_that_packing_keeps() -> None:
    # a 30% pod every minute for an hour, one 8-GPU pod at the end: packed, they share one GPU's worth of
    # nodes and the big pod starts at once; spread, every node holds a share and the big pod waits
    pods = [(TraceJob(f"p{i}", 60.0 * i, 3600.0, 1), 300) for i in range(9)]
    pods.append((TraceJob("big", 600.0, 600.0, 8), 1000))
    packed = simulate(small_cluster(), pods, "mps", check=True)
    spread = simulate(small_cluster(), pods, "mps", placement="spread", check=True)
    assert packed.whole_node_wait_s == (0.0,) and packed.broke_whole_node_while_used_fit == 0
    assert spread.whole_node_wait_s[0] > 0 and spread.broke_whole_node_while_used_fit > 0


def test_requests_per_mode() -> None:
    job = TraceJob("p", 0.0, 1.0, 1)
    assert request_for(job, 460, "mig") == GPU_80GB.profile("4g.40gb")
    assert request_for(job, 810, "mig") == WholeGpus(1)  # only 7g covers it: a whole GPU
    assert request_for(job, 460, "mps") == MpsShare(46, 36.8)
    assert request_for(job, 460, "whole") == WholeGpus(1)

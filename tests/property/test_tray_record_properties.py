"""Tray records hold what the NVLink placer decided: for random clique clusters, jobs and rank orders, the
tray pods of every placement that spans trays become a record whose derived TP groups are the placer's own
(same GPUs, TP-rank order) and that survives the status round trip."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core import ClusterState, JobSpec, Level, NodeSpec, Topology, cost_model
from paralleljob.core.errors import InvalidRequest, PlacementInfeasible
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods
from paralleljob.core.rankorder import RankOrder
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status, record_groups
from paralleljob.k8s.edge.status.trayrecords import TraySlot


@st.composite
def instances(draw: st.DrawFn) -> tuple[Topology, JobSpec, RankOrder]:
    g = draw(st.sampled_from([2, 4]))
    specs = [
        NodeSpec(f"c{c}-t{t}", g, 80.0, (f"clique-{c}", "spine", "cluster"))
        for c in range(draw(st.integers(1, 3)))
        for t in range(draw(st.integers(2, 5)))
    ]
    levels = [Level("node", 100.0), Level("clique", 100.0), Level("spine", 20.0), Level("cluster", 10.0)]
    topo = Topology.from_nodes(specs, levels, nvlink_level=1)
    tp = draw(st.sampled_from([g // 2, g, 2 * g]))
    pp, dp = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return topo, JobSpec("job", tp, pp, dp, 40.0), draw(st.sampled_from(list(RankOrder)))


@settings(max_examples=120, deadline=None)
@given(instances())
def test_a_tray_record_spells_the_placers_tp_groups(instance: tuple[Topology, JobSpec, RankOrder]) -> None:
    topo, job, order = instance
    try:
        placement = NVLinkPlacer(ClusterState(topo), rank_order=order).place(job, cost_model("seed"))
        pods = tray_pods(topo, placement.groups, job.tp, job.pp, job.dp, order)
    except (PlacementInfeasible, InvalidRequest):
        return  # no fit, or not one block per tray: no tray record is made
    first = topo.node_first_gpu
    trays = tuple(
        TraySlot(
            f"job-tray{p.node_rank}",
            topo.node_names[p.node],
            tuple(x - first[p.node] for x in p.gpus),
            p.node_rank,
            p.clique,
        )
        for p in pods
    )
    record = PlacementRecord(1, "seed", job.tp, job.pp, job.dp, (), order, trays=trays)

    def name(gpu: int) -> str:
        node = topo.gpu_node[gpu]
        return f"{topo.node_names[node]}/{gpu - first[node]}"

    assert record_groups(record) == [[name(x) for x in group] for group in placement.groups]
    assert record_from_status({"placement": record.to_status()}) == record
    assert record.num_gpus == job.tp * job.pp * job.dp

"""``paralleljob status`` and ``describe`` on a mixed HGX + NVL72 cluster (issue 38): a tray job is described
tray by tray (clique, ranks, and the replicas/stages its ranks belong to) instead of crashing; the map groups
HGX nodes by leaf and trays by clique, not one table per HGX node; a NotReady node shows all its GPUs and its
reason once; describe reads at 80 columns and says the last failure in words."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console

from paralleljob.clitools.describe import describe_job
from paralleljob.clitools.gpumap import build_map
from paralleljob.clitools.jobrender import description_renderable, failure_text
from paralleljob.clitools.render import gpu_map_renderable
from paralleljob.k8s.edge.render import computedomain as cd
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def mixed(hgx: int = 2) -> FakeCluster:
    """Two racks of six 4-GPU trays (cliques uuid.0, uuid.1) beside HGX nodes on their own leaf."""
    nodes = [
        node(f"r{r}-t{t:02d}", 4, leaf=f"leaf-r{r}", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: f"uuid.{r}"})
        for r in range(2)
        for t in range(6)
    ]
    nodes += [node(f"hgx-{h}", 8, leaf="leaf-hgx") for h in range(hgx)]
    return FakeCluster(nodes)


def tray_job(fc: FakeCluster, order: str = "tp-pp-dp") -> dict[str, Any]:
    fc.add_job(paralleljob("llm", 8, 2, 2, memory=10.0, extra_spec={"rankOrder": order}))
    fc.settle()
    assert fc.phase("ns/llm") == "Running"
    job = fc.job("ns/llm")
    assert job["status"]["placement"].get("layout") == "trays"
    return job


def text(renderable: Any, width: int) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_describe_a_tray_job_shows_each_trays_clique_ranks_replica_and_stage() -> None:
    fc = mixed()
    job = tray_job(fc)
    d = describe_job(job, fc.job_pods("ns/llm"))
    assert len(d.pods) == 8 and [p.node_rank for p in d.pods] == list(range(8))
    for p in d.pods:
        # TP8 on trays of 4: trays 2g and 2g+1 are TP group g; tp-pp-dp numbers groups d x pp + p
        assert p.ranks == tuple(range(4 * p.node_rank, 4 * p.node_rank + 4))
        assert p.groups == ((p.node_rank // 4, p.node_rank // 2 % 2),) == ((p.replica, p.stage),)
        assert p.clique in ("uuid.0", "uuid.1") and p.node.startswith(f"r{p.clique[-1]}-")
        assert p.pod_phase == "Running"
    shown = text(description_renderable(d), 80)
    assert "clique" in shown and "uuid.0" in shown and "uuid.1" in shown and "28-31" in shown


def test_a_tray_holding_several_tp_groups_names_them_all() -> None:
    fc = mixed()
    job = tray_job(fc, order="tp-dp-pp")
    # the same record read as TP2 trays of 4 (two whole TP groups per tray) under tp-dp-pp
    placement = job["status"]["placement"]
    placement["shape"] = {"tensor": 2, "pipeline": 4, "data": 4}
    job["spec"].update(tensorParallel=2, pipelineParallel=4, dataParallel=4)
    d = describe_job(job)
    first = d.pods[0]  # ranks 0-3: TP groups (node ranks) 0 and 1 = stage 0, replicas 0 and 1
    assert first.groups == ((0, 0), (1, 0)) and (first.replica, first.stage) == (0, 0)
    shown = text(description_renderable(d), 100)
    row = next(line for line in shown.splitlines() if "llm-tray0 " in line)
    assert re.search(r"│ 0-1 +│ 0 +│", row), row


def test_status_groups_hgx_nodes_by_leaf_and_trays_by_clique() -> None:
    fc = mixed(hgx=3)
    tray_job(fc)
    gpu_map = build_map(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    groups = {domain: {r.name for r in rows} for domain, rows in gpu_map.by_domain().items()}
    assert groups == {
        "leaf-hgx/spine-00/zone-0": {"hgx-0", "hgx-1", "hgx-2"},
        "uuid.0/leaf-r0/spine-00/zone-0": {f"r0-t{t:02d}" for t in range(6)},
        "uuid.1/leaf-r1/spine-00/zone-0": {f"r1-t{t:02d}" for t in range(6)},
    }
    levels = {row.domain: row.level for row in gpu_map.nodes}
    assert levels["leaf-hgx/spine-00/zone-0"] == "leaf" and levels["uuid.0/leaf-r0/spine-00/zone-0"] == "clique"
    shown = text(gpu_map_renderable(gpu_map), 120)
    assert "leaf leaf-hgx/spine-00/zone-0" in shown and "clique uuid.0/leaf-r0/spine-00/zone-0" in shown
    assert "~" not in shown


def test_a_notready_node_shows_all_its_gpus_and_its_reason_once() -> None:
    fc = mixed()
    fc.nodes["hgx-1"]["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "KubeletDown", "message": "kubelet stopped posting"}
    ]
    gpu_map = build_map(fc.nodes.values(), fc.pods.values(), fc.jobs.values())
    (row,) = [r for r in gpu_map.nodes if r.name == "hgx-1"]
    assert [c.state for c in row.gpus] == ["unhealthy"] * 8
    shown = text(gpu_map_renderable(gpu_map), 160)
    line = next(line for line in shown.splitlines() if "hgx-1" in line)
    assert "xxxxxxxx" in line and "0-7: " in line, line
    assert shown.count("not Ready") == 1, shown


def test_describe_at_80_columns_keeps_names_and_times_whole() -> None:
    fc = FakeCluster([node(f"gpu-node-{i:03d}", leaf="leaf-00") for i in range(4)])
    fc.add_job(paralleljob("llama-70b", 4, 2, 2, memory=10.0))
    fc.settle()
    long = "the operator moved the pods on the broken GPUs to free GPUs of the same leaf, keeping stage 0 on NVLink"
    events = [
        {"type": "Normal", "reason": "Placed", "message": long, "lastTimestamp": "2024-01-01T00:00:02Z"},
        {"type": "Warning", "reason": "GPUFailure", "message": long, "lastTimestamp": "2024-01-01T00:00:03Z"},
    ]
    d = describe_job(fc.job("ns/llama-70b"), fc.job_pods("ns/llama-70b"), events)
    shown = text(description_renderable(d), 80)
    assert max(len(line) for line in shown.splitlines()) <= 80
    words = {w for line in shown.splitlines() for w in re.findall(r"[\w.:-]+", line)}
    for pod in d.pods:
        assert pod.name in words and pod.node in words, (pod.name, pod.node, shown)
    for stamp in ("2024-01-01T00:00:02Z", "2024-01-01T00:00:03Z", "2024-01-01T00:00:01Z"):
        assert stamp in words, shown
    # costs rounded for reading, the status keeps its precision
    assert "233.71" in shown and "233.710821" not in shown and "233.333333" not in shown
    # far narrower: every pod still on its own line, names whole
    narrow = text(description_renderable(d), 40)
    assert all(any(line.startswith(f"{p.name}: ") for line in narrow.splitlines()) for p in d.pods), narrow


def test_the_last_failure_reads_as_a_sentence() -> None:
    failure = {
        "time": "2024-01-01T00:00:05Z",
        "kind": "GPUFailure",
        "reason": "GPUUnhealthy",
        "message": "GPU 3 on gpu-node-000 reported unhealthy",
        "action": "Repaired",
        "nodes": ["gpu-node-000"],
        "pods": ["llm-d0-p0", "llm-d1-p0"],
        "costBeforeMs": 233.710821,
        "costAfterMs": 1601.537911,
    }
    fc = FakeCluster([node("n0")])
    fc.add_job(paralleljob("small", 2, 1, 1))
    fc.settle()
    job = fc.job("ns/small")
    job["status"]["lastFailure"] = failure
    shown = text(description_renderable(describe_job(job)), 200)
    assert "last failure: GPUFailure at 2024-01-01T00:00:05Z: GPU 3" in shown
    assert "['" not in shown and "{" not in shown
    said = failure_text(failure)
    assert said == (
        "GPUFailure at 2024-01-01T00:00:05Z: GPU 3 on gpu-node-000 reported unhealthy (reason GPUUnhealthy;"
        " action Repaired; nodes gpu-node-000; pods llm-d0-p0, llm-d1-p0; cost 233.71 -> 1601.54 ms)"
    )

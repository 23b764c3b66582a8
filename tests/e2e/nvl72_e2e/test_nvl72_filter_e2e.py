"""A job's node filter on a mixed cluster (2 GB200 NVL72 racks beside 4 free HGX nodes of 8 GPUs), end to end:
a TP8 job with ``gpuProduct: NVIDIA-GB200`` takes whole trays of one clique although every HGX node has room
for it, and a TP4 job whose ``nodeSelector`` names one clique stays on that clique's trays (the "HGX nodes
first" step honours the filter, issue 39)."""

from __future__ import annotations

import pytest
from pjhelpers import Jobs

from paralleljob.devcluster import nvl72
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status

pytestmark = pytest.mark.e2e


def test_a_node_filter_holds_on_a_cluster_with_nvl72_racks(nvl72_kube: KubeSession, nvl72_pjs: Jobs) -> None:
    kube, pjs = nvl72_kube, nvl72_pjs
    nodes = kube.run(kube.core.list_node()).items
    cliques = {n.metadata.name: (n.metadata.labels or {}).get(cd.CLIQUE_LABEL) for n in nodes}

    pjs.create("gb200", 8, 1, 1, gpuMemoryGiB=10, gpuProduct=nvl72.PRODUCT)
    pjs.wait_phase("gb200", "Running", timeout_s=60)
    record = record_from_status(pjs.status("gb200"))
    assert record is not None and len(record.trays) == 2 and not record.slots, pjs.status("gb200")
    assert len({cliques[t.node] for t in record.trays} | {t.clique for t in record.trays}) == 1, record.trays
    assert {p.spec.node_name for p in pjs.live_pods("gb200")} == set(record.nodes)

    (other,) = {c for c in cliques.values() if c is not None} - {record.trays[0].clique}
    template = {
        "spec": {"nodeSelector": {cd.CLIQUE_LABEL: other}, "containers": [{"name": "trainer", "image": "trainer:e2e"}]}
    }
    pjs.create("pinned", 4, 1, 2, gpuMemoryGiB=10, template=template)
    pjs.wait_phase("pinned", "Running", timeout_s=60)
    pinned = record_from_status(pjs.status("pinned"))
    assert pinned is not None and pinned.nodes, pjs.status("pinned")
    assert {cliques[n] for n in pinned.nodes} == {other}, pinned.nodes
    assert {cliques[p.spec.node_name] for p in pjs.live_pods("pinned")} == {other}
    pjs.delete("gb200")
    pjs.delete("pinned")

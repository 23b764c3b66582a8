"""The CLI's models on DRA nodes (issue 13 part 5): ``status`` counts a node's GPUs from its ResourceSlice
(a DRA node has no nvidia.com/gpu allocatable, so without the slices it has none), shows each GPU's device
name and UUID and the devices other claims hold; ``describe`` shows the devices and UUIDs of a pod's claim."""

from __future__ import annotations

import copy
from typing import Any

from rich.console import Console

from paralleljob.clitools.describe import PodDevices, describe_job, pod_devices
from paralleljob.clitools.gpumap import USED, DraObjects, build_map
from paralleljob.clitools.jobrender import description_renderable
from paralleljob.clitools.render import gpu_map_renderable
from tests.cli.test_cli_models import cluster
from tests.k8s.factories import node
from tests.k8s.test_dra import claim, dra_node, gpu, resource_slice

SLICE = resource_slice("b-dra", [gpu(i, root="pci0000:00" if i < 4 else "pci0000:80") for i in range(8)])
UUID = "GPU-4f1b8c2e-0000-0000-0000-00000000000{}"  # what tests.k8s.test_dra.gpu publishes


def _claiming_pod(name: str, claim_name: str, *, from_template: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}]}
    status: dict[str, Any] = {"phase": "Running"}
    if from_template:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim_name}]
    else:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_name}]
    return {"metadata": {"name": name, "namespace": "team"}, "spec": spec, "status": status}


def test_status_reads_dra_nodes_gpus_from_their_slices() -> None:
    nodes = [node("a-plugin"), dra_node("b-dra")]
    theirs = claim("theirs", [("gpu.nvidia.com", "b-dra", "gpu-2"), ("gpu.nvidia.com", "b-dra", "gpu-3")])
    without = build_map(nodes, [], [])
    assert [r.name for r in without.nodes] == ["a-plugin"], "a DRA node has no GPUs without its slice"
    m = build_map(nodes, [], [], dra_objects=DraObjects(slices=[SLICE], claims=[theirs]))
    assert m.totals["total"] == 16 and m.totals[USED] == 2
    row = next(r for r in m.nodes if r.name == "b-dra")
    assert [c.device for c in row.gpus] == [f"gpu-{i}" for i in range(8)]
    assert [c.uuid for c in row.gpus] == [UUID.format(i) for i in range(8)]
    assert [c.index for c in row.gpus if c.state == USED] == [2, 3]
    assert {c.holder for c in row.gpus if c.state == USED} == {"claims:b-dra"}
    plugin = next(r for r in m.nodes if r.name == "a-plugin")
    assert all(c.device == c.uuid == "" for c in plugin.gpus)
    console = Console(record=True, width=160, color_system=None)
    console.print(gpu_map_renderable(m))
    text = console.export_text()
    assert "Ready DRA" in text and "16 total, 2 used" in text


def test_a_pods_devices_come_from_its_claim_or_its_templates_claim() -> None:
    claims = [
        claim("named", [("gpu.nvidia.com", "b-dra", "gpu-5"), ("gpu.nvidia.com", "b-dra", "gpu-4")]),
        claim("made-from-template", [("gpu.nvidia.com", "b-dra", "gpu-1")]),
        claim("unknown-pool", [("gpu.nvidia.com", "elsewhere", "gpu-0")]),
    ]
    pods = [
        _claiming_pod("w0", "named"),
        _claiming_pod("w1", "made-from-template", from_template=True),
        _claiming_pod("w2", "unknown-pool"),
        {"metadata": {"name": "plugin-pod"}, "spec": {"containers": [{"name": "main"}]}},
    ]
    devices = pod_devices(pods, claims, [SLICE])
    assert devices == {
        "w0": PodDevices(("gpu-5", "gpu-4"), (UUID.format(5), UUID.format(4)), ("named",)),
        "w1": PodDevices(("gpu-1",), (UUID.format(1),), ("made-from-template",)),
        "w2": PodDevices(("gpu-0",), ("",), ("unknown-pool",)),
    }


def test_describe_shows_the_devices_and_uuids_of_each_workers_claim() -> None:
    fc = cluster()
    pods = copy.deepcopy(fc.job_pods("ns/small"))
    (pod,) = pods
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "small-d0-p0-gpus"}]
    results = [("gpu.nvidia.com", "b-dra", "gpu-6"), ("gpu.nvidia.com", "b-dra", "gpu-7")]
    claims = [claim("small-d0-p0-gpus", results)]
    d = describe_job(fc.job("ns/small"), pods, (), claims, [SLICE])
    (line,) = d.pods
    assert line.devices == ("gpu-6", "gpu-7") and line.uuids == (UUID.format(6), UUID.format(7))
    assert line.claims == ("small-d0-p0-gpus",)
    console = Console(record=True, width=240, color_system=None)
    console.print(description_renderable(d))
    text = console.export_text()
    assert f"gpu-6={UUID.format(6)}" in text and "devices" in text
    # Device-plugin workers: no devices column at all.
    plain = describe_job(fc.job("ns/small"), fc.job_pods("ns/small"))
    assert plain.pods[0].devices == () and plain.pods[0].uuids == ()

"""PCIe locality end to end (issue 13 part 4): an operator whose topology file turns the PCIe-root level on
(``pcieRootBandwidthGbps``) keeps each TP group of a job under one root of the dev cluster's DRA nodes (two
roots of four GPUs each), and its claims name exactly those devices."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from drahelpers import RESOURCE, assert_claims_match_placement, assert_no_device_in_two_claims, custom, hold_devices
from pjhelpers import Jobs, OperatorProcess, jobs_in, running

from paralleljob.devcluster import dra
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e

# A PCIe-only product: 64 GB/s under one root, 32 GB/s between the roots of a node, the fabric above slower.
TOPOLOGY = {
    "topology": {
        "nodeBandwidthGbps": 32,
        "pcieRootBandwidthGbps": 64,
        "clusterBandwidthGbps": 12.5,
        "levels": [
            {"name": "leaf", "labels": ["network.topology.nvidia.com/leaf"], "bandwidthGbps": 25},
            {"name": "spine", "labels": ["network.topology.nvidia.com/spine"], "bandwidthGbps": 20},
        ],
    }
}


@pytest.fixture(scope="module")
def pcie_operator(dra_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    workdir = tmp_path_factory.mktemp("dra-pcie-operator")
    config = workdir / "topology.yaml"
    config.write_text(yaml.safe_dump(TOPOLOGY))
    args = ("--topology-config", str(config))
    with running(OperatorProcess(dra_cluster.kubeconfig, workdir, identity="e2e-dra-pcie", extra_args=args)) as proc:
        yield proc


@pytest.fixture
def pcie_pjs(dra_kube: KubeSession, dra_namespace: str, pcie_operator: OperatorProcess) -> Iterator[Jobs]:
    with jobs_in(dra_kube, dra_namespace, pcie_operator, check_view=True) as jobs:
        yield jobs


def _roots(kube: KubeSession) -> dict[tuple[str, str], str]:
    listed = kube.run(custom(kube).list_cluster_custom_object(*RESOURCE, "resourceslices"))
    return {
        (item["spec"]["pool"]["name"], device["name"]): device["attributes"][dra.PCIE_ROOT_ATTRIBUTE]["string"]
        for item in listed["items"]
        for device in item["spec"]["devices"]
    }


def test_tp4_groups_stay_under_one_pcie_root(
    pcie_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, dra_namespace: str
) -> None:
    # gpu-1 of every node is someone else's: the first root keeps three free GPUs, the second four, and the
    # lowest free GPUs (0, 2, 3, 4) would straddle the roots.
    for node in dra_cluster.nodes:
        hold_devices(dra_kube, dra_namespace, f"held-{node}", node, ["gpu-1"])
    pcie_pjs.create("local", tp=4, pp=1, dp=4)
    status = pcie_pjs.wait_phase("local", "Running", timeout_s=60)
    assert_claims_match_placement(pcie_pjs, dra_kube, "local")
    roots = _roots(dra_kube)
    pods: list[dict[str, Any]] = status["placement"]["pods"]
    assert len(pods) == 4
    for pod in pods:
        under = {roots[(pod["node"], f"gpu-{i}")] for i in pod["gpuIndices"]}
        assert len(under) == 1, f"{pod['name']} spans PCIe roots {sorted(under)}: GPUs {pod['gpuIndices']}"
        assert pod["gpuIndices"] == [4, 5, 6, 7]
    assert_no_device_in_two_claims(dra_kube)

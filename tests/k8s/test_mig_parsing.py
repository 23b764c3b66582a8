"""MIG at the edge (issue 44 item 1): ``spec.gpuSharing`` checked as the CRD checks it, the GPU Operator's
device-plugin MIG resources and labels, the single strategy's slices never counted as whole GPUs, a record
of slices read back as written, and the partitionable shape's placements read from its counters."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from paralleljob.core.errors import InvalidRequest
from paralleljob.core.rankorder import RankOrder
from paralleljob.core.slices.mig import GPU_80GB
from paralleljob.devcluster.migslices import mig_device
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.migdevices import PROFILE_PATTERN, parse_mig_device
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.specs import SHARING_MESSAGES, parse_request
from paralleljob.k8s.edge.status.records import MigGrant, PlacementRecord, PodSlot, record_from_status
from tests.k8s.factories import node, paralleljob

CRD = Path(__file__).parents[2] / "crds" / "paralleljob.yaml"


def spec(**changes: Any) -> dict[str, Any]:
    body = paralleljob("j", tp=1, pp=1, dp=2, extra_spec={"gpuSharing": {"migProfile": "1g.10gb"}})["spec"]
    body["parallelism"].update(changes)
    return body


def test_gpu_sharing_asks_for_a_mig_profile_for_one_gpu_per_rank() -> None:
    assert parse_request("ns/j", spec()).mig_profile == "1g.10gb"
    assert parse_request("ns/j", paralleljob("w")["spec"]).mig_profile == ""
    with pytest.raises(InvalidRequest, match=re.escape(SHARING_MESSAGES["tensor"])):
        parse_request("ns/j", spec(tensor=2))
    with pytest.raises(InvalidRequest, match=re.escape(SHARING_MESSAGES["sized"])):
        parse_request("ns/j", spec(minData=1, maxData=2))
    for bad in ("1g", "8g.80gb", "1g.10GB", "", 3):
        body = spec()
        body["gpuSharing"] = {"migProfile": bad}
        with pytest.raises(InvalidRequest, match=re.escape(SHARING_MESSAGES["profile"])):
            parse_request("ns/j", body)


def test_the_crd_refuses_the_same_with_the_same_words() -> None:
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_messages = [r["message"] for r in schema["x-kubernetes-validations"]]
    assert SHARING_MESSAGES["tensor"] in spec_messages and SHARING_MESSAGES["sized"] in spec_messages
    profile = schema["properties"]["gpuSharing"]["properties"]["migProfile"]
    (rule,) = profile["x-kubernetes-validations"]
    assert rule["message"] == SHARING_MESSAGES["profile"]
    # the CEL regex is the parser's (YAML and CEL each unescape once)
    assert PROFILE_PATTERN.replace("\\", "\\\\") in rule["rule"]
    pods = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert "migSlice" in pods["placement"]["properties"]["pods"]["items"]["properties"]  # else pruned


def test_device_plugin_mig_resources_and_labels_are_one_offer() -> None:
    body = node("dp-0", 8)
    body["status"]["allocatable"].update({"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"})
    body["status"]["allocatable"]["nvidia.com/gpu"] = "4"  # the GPUs not in MIG mode
    body["metadata"]["labels"].update(
        {
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig.config": "custom",
            "nvidia.com/mig.config.state": "success",
        }
    )
    info = parse_node(body, TopologyConfig())
    assert info.mig is not None and info.mig.api == "device-plugin" and info.mig.ready
    assert info.mig.counts == (("1g.10gb", 14), ("3g.40gb", 4)) and info.mig.config == "custom"
    assert info.mig.count("1g.10gb") == 14 and info.mig.profiles == ("1g.10gb", "3g.40gb")
    assert info.gpu_count == 4  # only the whole GPUs are whole
    assert not info.warnings  # fewer nvidia.com/gpu than GFD counted is the mixed strategy, not a sick plugin
    body["metadata"]["labels"]["nvidia.com/mig.config.state"] = "pending"
    pending = parse_node(body, TopologyConfig())
    assert pending.mig is not None and not pending.mig.ready
    assert any("mig.config.state=pending" in w for w in pending.warnings)


def test_the_single_strategy_offers_slices_as_gpus_so_none_is_whole() -> None:
    body = node("single-0", 56, product="NVIDIA-A100-SXM4-80GB-MIG-1g.10gb")
    body["metadata"]["labels"]["nvidia.com/mig.strategy"] = "single"
    info = parse_node(body, TopologyConfig(max_gpus_per_node=64))
    assert info.gpu_count == 0
    assert any("mig.strategy single" in w for w in info.warnings)


def test_a_record_of_slices_reads_back_as_written() -> None:
    slots = tuple(PodSlot(f"j-d{d}-p0", d, 0, "n0", (3,), 1, MigGrant("1g.10gb", d)) for d in range(2))
    record = PlacementRecord(1, "seed", 1, 1, 2, slots, RankOrder.TP_DP_PP)
    status = record.to_status()
    assert status["pods"][1]["migSlice"] == {"profile": "1g.10gb", "start": 1}
    back = record_from_status({"placement": status})
    assert back is not None and back.slots == slots and back.sliced


def test_a_mig_devices_placement_is_read_from_its_memory_slice_counters() -> None:
    shape = NodeShape(count=1, gpu_api="dra")
    for profile in GPU_80GB.profiles:
        for start in profile.starts:
            warnings: list[str] = []
            device = parse_mig_device(mig_device(shape, "n0", 2, profile, start), warnings)
            assert device is not None and not warnings
            assert (device.profile, device.start, device.size) == (profile.name, start, profile.memory_slices)
            assert device.counter_set == "gpu-2-counter-set"
    broken = mig_device(shape, "n0", 0, GPU_80GB.profile("2g.20gb"), 2)
    del broken["consumesCounters"][0]["counters"]["memory-slice-2"]
    broken["consumesCounters"][0]["counters"]["memory-slice-5"] = {"value": "1"}
    warnings = []
    assert parse_mig_device(broken, warnings) is None and "not one run" in warnings[0]


def test_the_dev_clusters_device_plugin_mig_node_is_parsed_as_the_gpu_operator_leaves_it() -> None:
    from paralleljob.devcluster.nodes import gpu_node_manifest

    shape = NodeShape(count=2, mig_nodes=1)
    mig = parse_node(gpu_node_manifest(shape, 0), TopologyConfig())
    assert mig.gpu_count == 0 and not mig.warnings  # every GPU in MIG mode: none is whole
    assert mig.mig is not None and mig.mig.api == "device-plugin" and mig.mig.ready
    assert mig.mig.counts == (("1g.10gb", 56),) and mig.mig.config == "all-1g.10gb"
    plain = parse_node(gpu_node_manifest(shape, 1), TopologyConfig())
    assert plain.gpu_count == 8 and plain.mig is None
    with pytest.raises(ValueError, match="mig_nodes"):
        NodeShape(count=1, mig_nodes=2)

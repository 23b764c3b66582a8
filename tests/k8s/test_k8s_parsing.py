"""Pure parts of the operator: parsing nodes, pods and specs at the edge, the store's ordering rules,
status patches, lease decisions, manifests and gauges."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from paralleljob.core.lifecycle import Event, Phase
from paralleljob.core.rankorder import RankOrder
from paralleljob.k8s.edge.config import LevelSource, TopologyConfig, topology_from_mapping
from paralleljob.k8s.edge.constants import GPU_RESOURCE
from paralleljob.k8s.edge.lease import verdict
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import FAILURE_MESSAGE_CHARS, parse_pod
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.manifests import binding, headless_service, worker_pod
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, record_from_status
from paralleljob.k8s.plan.kinds.sizings import sizing_of
from paralleljob.k8s.plan.metrics_model import jain_index
from paralleljob.k8s.plan.status import StatusDraft, merge_patch
from paralleljob.k8s.view.clusterview import build_view
from paralleljob.k8s.view.store import ObjectStore
from tests.k8s.factories import foreign_pod, node, paralleljob

CONFIG = TopologyConfig()


def test_node_labels_become_gpus_memory_and_domains() -> None:
    info = parse_node(node("n1", leaf="leaf-7"), CONFIG)
    assert info.gpu_count == 8 and info.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert abs(info.gpu_memory_gib - 81559 / 1024) < 1e-9
    assert info.domains == (None, "leaf-7", "spine-00", None, "zone-0")
    assert info.takes_new_work and info.runs_work and not info.warnings


def test_malformed_labels_are_ignored_with_a_warning() -> None:
    body = node("n1", memory_mib="lots", unhealthy="1,x")
    body["status"]["allocatable"][GPU_RESOURCE] = "eight"
    info = parse_node(body, CONFIG)
    assert info.gpu_count == 0 and info.gpu_memory_gib == CONFIG.default_gpu_memory_gib
    assert info.unhealthy_gpus == frozenset({1})
    assert len(info.warnings) == 4  # allocatable, memory, the index "x", and index 1 of a node with no GPUs
    assert "ignored GPU indices [1]" in info.warnings[-1]


def test_node_health_signals() -> None:
    assert not parse_node(node("n", ready=False), CONFIG).runs_work
    cordoned = parse_node(node("n", cordoned=True), CONFIG)
    assert cordoned.runs_work and not cordoned.takes_new_work
    tainted = parse_node(node("n", taints=[{"key": "x", "effect": "NoExecute"}]), CONFIG)
    assert not tainted.runs_work and tainted.broken_gpus() == frozenset(range(8))
    tolerated = parse_node(node("n", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), CONFIG)
    assert tolerated.takes_new_work
    gpu_condition = node("n")
    gpu_condition["status"]["conditions"].append({"type": "GPUHealthy", "status": "False"})
    assert parse_node(gpu_condition, CONFIG).broken_gpus() == frozenset(range(8))
    assert parse_node(node("n", unhealthy="2, 5"), CONFIG).broken_gpus() == frozenset({2, 5})


def test_topology_config_refuses_bandwidth_growing_upward() -> None:
    with pytest.raises(ValueError, match="faster"):
        TopologyConfig(levels=(LevelSource("leaf", ("a",), 50.0), LevelSource("spine", ("b",), 80.0)))
    custom = topology_from_mapping({"levels": [{"name": "rack", "labels": "rack", "bandwidthGbps": 100}]})
    assert custom.levels[0].labels == ("rack",)


def test_view_skips_absent_levels_and_counts_foreign_pods() -> None:
    nodes = [parse_node(node(f"n{i}", leaf=f"l{i // 2}"), CONFIG) for i in range(4)]
    view = build_view(nodes, [parse_pod(foreign_pod("x", "n1", 3))], [], CONFIG)
    assert not view.empty
    assert [lv.name for lv in view.topology.levels] == ["node", "leaf", "spine", "zone", "cluster"]
    assert view.state.usable_free(view.node_index["n1"]) == 5
    assert view.occupants == {"n1": ["other/x"]}


def test_view_keeps_ghost_nodes_named_by_a_record() -> None:
    slots = (PodSlot("j-d0-p0", 0, 0, "gone", (0, 1)),)
    record = PlacementRecord(1, "seed", 2, 1, 1, slots, RankOrder.TP_DP_PP)
    from paralleljob.k8s.view.clusterview import Claim

    view = build_view([parse_node(node("n0"), CONFIG)], [], [Claim("ns/j", "u", record)], CONFIG)
    assert "gone" in view.ghosts and view.broken_gpus(slots[0])


def test_spec_parsing_reports_what_to_fix() -> None:
    job = parse_job(paralleljob("ok", 4, 2, 2))
    assert job.request is not None and job.request.spec.num_gpus == 16 and job.phase is Phase.PENDING
    bad = paralleljob("bad", 4, 2, 2)
    bad["spec"]["parallelism"]["tensor"] = 100
    assert "exceeds" in parse_job(bad).invalid
    bad = paralleljob("bad")
    bad["spec"]["failurePolicy"]["onUnplaceable"] = "Sometimes"
    assert "onUnplaceable" in parse_job(bad).invalid


def test_record_round_trips_through_the_status() -> None:
    slots = (PodSlot("j-d0-p0", 0, 0, "n0", (0, 1), 3), PodSlot("j-d0-p1", 0, 1, "n1", (4, 5), 3))
    record = PlacementRecord(3, "seed", 2, 2, 1, slots, RankOrder.TP_DP_PP)
    status = record.to_status()
    assert status["tpGroups"] == [["n0/0", "n0/1"], ["n1/4", "n1/5"]]
    assert status["ppStages"] == [["n0/0", "n0/1"], ["n1/4", "n1/5"]]
    assert record_from_status({"placement": status}) == record


def test_store_ignores_stale_events_and_deletions_of_replaced_objects() -> None:
    store: ObjectStore[str] = ObjectStore(lambda b: b["metadata"]["uid"])
    new = {"metadata": {"namespace": "n", "name": "p", "uid": "b", "resourceVersion": "20"}}
    old = {"metadata": {"namespace": "n", "name": "p", "uid": "a", "resourceVersion": "10"}}
    assert store.upsert(new)
    assert not store.upsert(old), "an older event never overwrites a newer copy"
    assert not store.remove(old), "the predecessor's DELETED does not remove its successor"
    assert store.get("n", "p") == "b"
    store.replace_all([], "15")
    assert store.get("n", "p") == "b", "created after the list was taken: kept"
    store.replace_all([], "25")
    assert store.get("n", "p") is None


def test_status_draft_moves_phase_through_the_table_and_patches_minimally() -> None:
    draft = StatusDraft({}, Phase.PENDING, 1)
    draft.apply(Event.ACCEPTED, "Queued", "waits", "t0")
    draft.apply(Event.ADMITTED, "Placed", "on n0", "t0")
    assert draft.data["phase"] == "Placing"
    types = {c["type"]: c["status"] for c in draft.data["conditions"]}
    assert types == {"Accepted": "True", "Placed": "True", "Bound": "False"}
    assert merge_patch({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"x": 1}, "c": 2}) == {
        "b": None,
        "a": {"y": None},
        "c": 2,
    }


def test_lease_verdicts() -> None:
    now = dt.datetime(2024, 1, 1, 0, 0, 10, tzinfo=dt.UTC)
    fresh = {"holderIdentity": "other", "renewTime": "2024-01-01T00:00:05.000000Z", "leaseDurationSeconds": 15}
    assert not verdict(fresh, "me", now).take
    stale = {**fresh, "renewTime": "2023-12-31T23:59:00.000000Z"}
    assert verdict(stale, "me", now).take and verdict(stale, "me", now).transitions == 1
    assert verdict(fresh, "other", now).take, "a holder renews its own lease"
    assert verdict({}, "me", now).take


def test_worker_pod_and_service_manifests() -> None:
    job = parse_job(paralleljob("llm", 4, 2, 2))
    assert job.request is not None
    slots = tuple(PodSlot(f"llm-d{d}-p{p}", d, p, "n3", (4, 5, 6, 7), 1) for d in range(2) for p in range(2))
    record = PlacementRecord(1, "seed", 4, 2, 2, slots, RankOrder.TP_PP_DP)
    pod = worker_pod(job, job.request, record, record.slots[2], 1, sizing_of(job.request))
    assert pod["spec"]["schedulerName"] == "paralleljob-scheduler" and "nodeName" not in pod["spec"]
    assert pod["metadata"]["annotations"]["paralleljob.dev/gpu-indices"] == "4,5,6,7"
    assert pod["metadata"]["labels"]["paralleljob.dev/replica"] == "1"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["NODE_RANK"] == "2" and env["PJ_DP_RANK"] == "1" and env["PJ_PP_RANK"] == "0"
    assert headless_service(job)["spec"]["clusterIP"] == "None"
    assert binding("ns", "p", "uid-1", "n3")["metadata"]["uid"] == "uid-1"


def test_jain_index() -> None:
    assert jain_index([1.0, 1.0, 1.0]) == 1.0
    assert abs(jain_index([1.0, 0.0]) - 0.5) < 1e-12
    assert jain_index([]) == 1.0


def test_the_crd_bounds_the_model_with_the_operators_numbers_and_words() -> None:
    # Issue 22: the API server must refuse what the operator refuses, in the same words, so an operator on an
    # older CRD and the API server on a newer one tell the user the same thing.
    from pathlib import Path

    import yaml

    from paralleljob.core.errors import InvalidRequest
    from paralleljob.core.job import JobSpec, ModelShape
    from paralleljob.k8s.edge.parse.specs import MODEL_BOUNDS

    crd = yaml.safe_load((Path(__file__).parents[2] / "crds" / "paralleljob.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    model = spec["model"]["properties"]
    for field, (limit, message) in MODEL_BOUNDS.items():
        rules = model[field]["x-kubernetes-validations"]
        assert [r["message"] for r in rules] == [message]
        assert f"<= {int(limit)}" in rules[0]["rule"].replace(".0", "")
        assert "description" in model[field]  # says why the bound is where it is
    template_rules = spec["template"]["properties"]["spec"]["x-kubernetes-validations"]
    assert any("schedulerName" in r["rule"] and "paralleljob-scheduler" in r["rule"] for r in template_rules)
    for shape in (ModelShape(hidden_dim=2**40), ModelShape(seq_len=2**40), ModelShape(num_params_billions=1e5)):
        with pytest.raises(InvalidRequest, match="beyond any real model"):
            JobSpec("j", 1, 1, 1, 0.0, shape)


def test_a_failed_workers_termination_message_is_part_of_its_failure() -> None:
    """What the program wrote to /dev/termination-log (or its log's tail) says why it stopped: lastFailure and
    the WorkerFailure Event carry its end, on one line."""

    def failed(message: str | None) -> dict[str, Any]:
        terminated: dict[str, Any] = {"exitCode": 1, "reason": "Error"}
        if message is not None:
            terminated["message"] = message
        return {
            "metadata": {"name": "w", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]},
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}],
            },
        }

    assert parse_pod(failed(None)).failure == "container trainer exited with code 1 (Error)"
    said = parse_pod(failed('{"problems":\n ["rank 6 saw 7 ranks"]}')).failure
    assert said == 'container trainer exited with code 1 (Error): {"problems": ["rank 6 saw 7 ranks"]}'
    long = parse_pod(failed("x" * 1000 + " the end")).failure
    assert long.endswith(" the end") and len(long.split(": ", 1)[1]) == FAILURE_MESSAGE_CHARS + 3

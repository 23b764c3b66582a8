"""Quantities, node selection rules and the pod template as the operator reads them (pure, no cluster)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.constants import GPU_RESOURCE
from paralleljob.k8s.edge.parse.matching import (
    Requirement,
    Taint,
    Term,
    Toleration,
    affinity_matches,
    label_matches,
    selector_matches,
    tolerates,
    untolerated,
)
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.quantity import (
    QuantityError,
    format_amount,
    parse_count,
    parse_quantity,
    scheduler_units,
)
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.parse.template import InvalidTemplate, effective_requests, parse_constraints
from tests.k8s.factories import foreign_pod, node, paralleljob

# ---- quantities ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Fraction(8)),
        ("1k", Fraction(1000)),
        ("500m", Fraction(1, 2)),
        ("1Gi", Fraction(2**30)),
        ("1.5Mi", Fraction(3 * 2**19)),
        ("1e3", Fraction(1000)),
        ("2E-1", Fraction(1, 5)),
        ("0.1", Fraction(1, 10)),
        (".5", Fraction(1, 2)),
        ("100n", Fraction(1, 10**7)),
        ("-2", Fraction(-2)),
        (7, Fraction(7)),
    ],
)
def test_quantities_parse_exactly(text: object, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1kk", " 1", "1 ", "1.2.3", "Gi", True, None, "1ki", "e3"])
def test_non_quantities_are_refused(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_counts_and_scheduler_units() -> None:
    assert parse_count("1k") == 1000 and parse_count(8) == 8 and parse_count("8") == 8
    assert parse_count("500m") is None and parse_count("-1") is None and parse_count("eight") is None
    assert scheduler_units("cpu", Fraction(1, 10)) == 100  # millicores
    assert scheduler_units("memory", Fraction(3, 2)) == 2  # whole bytes, rounded up as the scheduler does
    assert format_amount("cpu", 100_000_000) == "100000" and format_amount("cpu", 1500) == "1500m"
    assert format_amount("memory", 2**31) == "2Gi"


@given(st.integers(0, 10**6), st.sampled_from(["", "k", "M", "Ki", "Mi", "Gi", "m"]))
def test_whole_numbers_with_any_suffix_round_trip(number: int, suffix: str) -> None:
    scale = {"": 1, "k": 1000, "M": 10**6, "Ki": 1024, "Mi": 2**20, "Gi": 2**30, "m": Fraction(1, 1000)}[suffix]
    assert parse_quantity(f"{number}{suffix}") == number * scale


# ---- node selection rules --------------------------------------------------------------------------------------

LABELS = {"zone": "a", "gen": "5", "pool": "train"}


@pytest.mark.parametrize(
    ("req", "matches"),
    [
        (Requirement("zone", "In", ("a", "b")), True),
        (Requirement("zone", "In", ("b",)), False),
        (Requirement("missing", "In", ("a",)), False),
        (Requirement("zone", "NotIn", ("b",)), True),
        (Requirement("zone", "NotIn", ("a",)), False),
        (Requirement("missing", "NotIn", ("a",)), True),  # an absent label is "not in" anything
        (Requirement("pool", "Exists"), True),
        (Requirement("missing", "Exists"), False),
        (Requirement("missing", "DoesNotExist"), True),
        (Requirement("pool", "DoesNotExist"), False),
        (Requirement("gen", "Gt", ("4",)), True),
        (Requirement("gen", "Gt", ("5",)), False),
        (Requirement("gen", "Lt", ("6",)), True),
        (Requirement("pool", "Gt", ("1",)), False),  # a label that is not an integer never compares
        (Requirement("missing", "Lt", ("9",)), False),
    ],
)
def test_label_requirements_follow_kubernetes(req: Requirement, matches: bool) -> None:
    assert label_matches(req, LABELS) is matches


def test_terms_are_ored_and_their_requirements_anded() -> None:
    zone_a = Requirement("zone", "In", ("a",))
    pool_x = Requirement("pool", "In", ("x",))
    assert affinity_matches(None, LABELS, "n1")  # no affinity: every node
    assert not affinity_matches((), LABELS, "n1")  # no terms: nothing
    assert not affinity_matches((Term(),), LABELS, "n1")  # an empty term matches nothing
    assert not affinity_matches((Term((zone_a, pool_x)),), LABELS, "n1")
    assert affinity_matches((Term((pool_x,)), Term((zone_a,))), LABELS, "n1")
    by_name = Term(fields=(Requirement("metadata.name", "In", ("n1",)),))
    assert affinity_matches((by_name,), LABELS, "n1") and not affinity_matches((by_name,), LABELS, "n2")
    not_name = Term(fields=(Requirement("metadata.name", "NotIn", ("n1",)),))
    assert not affinity_matches((not_name,), LABELS, "n1") and affinity_matches((not_name,), LABELS, "n2")
    both = Term((zone_a,), (Requirement("metadata.name", "In", ("n2",)),))
    assert not affinity_matches((both,), LABELS, "n1") and affinity_matches((both,), LABELS, "n2")


def test_node_selector_needs_every_pair() -> None:
    assert selector_matches({}, LABELS)
    assert selector_matches({"zone": "a", "pool": "train"}, LABELS)
    assert not selector_matches({"zone": "a", "pool": "eval"}, LABELS)
    assert not selector_matches({"rack": "1"}, LABELS)


def test_tolerations_follow_kubernetes() -> None:
    taint = Taint("dedicated", "ml", "NoSchedule")
    assert tolerates(Toleration("dedicated", "Equal", "ml", "NoSchedule"), taint)
    assert tolerates(Toleration("dedicated", "Equal", "ml", ""), taint)  # empty effect: every effect
    assert not tolerates(Toleration("dedicated", "Equal", "ml", "NoExecute"), taint)
    assert not tolerates(Toleration("dedicated", "Equal", "web", ""), taint)
    assert tolerates(Toleration("dedicated", "Exists", "", ""), taint)
    assert tolerates(Toleration("", "Exists", "", ""), taint)  # empty key with Exists: every taint
    assert not tolerates(Toleration("other", "Exists", "", ""), taint)
    assert not tolerates(Toleration("dedicated", "Gt", "1", ""), taint)  # feature-gated operator: no match
    prefer = Taint("soft", "", "PreferNoSchedule")
    assert untolerated([prefer], []) is None  # a preference never keeps a pod away
    assert untolerated([prefer, taint], []) == taint
    assert untolerated([taint], [Toleration("dedicated", "Exists")]) is None


# ---- the template ------------------------------------------------------------------------------------------------


def spec_with(**fields: Any) -> dict[str, Any]:
    return {"containers": [{"name": "train", "image": "x"}], **fields}


def test_effective_requests_follow_the_init_and_sidecar_rule() -> None:
    spec = {
        "containers": [
            {"name": "a", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
            {"name": "b", "image": "x", "resources": {"limits": {"cpu": "500m"}}},  # request defaults to limit
        ],
        "initContainers": [
            {"name": "sidecar", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "setup", "image": "x", "resources": {"requests": {"cpu": "3", "memory": "4Gi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    # containers 2.5 + sidecar 1 = 3.5 CPUs; the setup container runs beside the sidecar: 3 + 1 = 4 > 3.5
    assert effective_requests(spec) == {"cpu": 4100, "memory": 4 * 2**30}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"nodeName": "gpu-node-000"}, "nodeName is set"),
        ({"restartPolicy": "Always"}, "restartPolicy must be Never"),
        ({"restartPolicy": "OnFailure"}, "restartPolicy must be Never"),
        ({"containers": [{"name": "a", "image": "x", "resources": {"limits": {GPU_RESOURCE: "abc"}}}]}, "'abc'"),
        ({"containers": [{"name": "a", "image": "x", "resources": {"requests": {GPU_RESOURCE: 2}}}]}, "exactly"),
        (
            {
                "containers": [
                    {"name": "a", "image": "x"},
                    {"name": "s", "image": "x", "resources": {"limits": {GPU_RESOURCE: 1}}},
                ]
            },
            "containers[1]",
        ),
        (
            {"initContainers": [{"name": "i", "image": "x", "resources": {"requests": {GPU_RESOURCE: "1"}}}]},
            "initContainers[0]",
        ),
        ({"containers": [{"name": "a", "image": "x", "resources": {"requests": {"cpu": "lots"}}}]}, "not a quantity"),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "without a key"),
        ({"nodeSelector": {"a": 1}}, "nodeSelector"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]
                        }
                    }
                }
            },
            "needs at least one value",
        ),
    ],
)
def test_fields_the_operator_owns_or_cannot_read_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidTemplate, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_constraints(spec_with(**fields), 4)


def test_a_gpu_request_equal_to_tensor_and_never_are_accepted() -> None:
    spec = spec_with(
        restartPolicy="Never",
        containers=[{"name": "a", "image": "x", "resources": {"limits": {GPU_RESOURCE: "4"}, "requests": {"cpu": 8}}}],
    )
    assert parse_constraints(spec, 4).requests == (("cpu", 8000),)


def test_an_invalid_template_fails_the_job_as_invalid_template() -> None:
    job = parse_job(paralleljob("a", extra_spec={"template": {"spec": spec_with(nodeName="n")}}))
    assert job.request is None and job.invalid_reason == "InvalidTemplate" and "nodeName" in job.invalid


# ---- nodes and pods ----------------------------------------------------------------------------------------------


def test_allocatable_gpus_are_capped_at_the_gfd_count_and_the_configured_maximum() -> None:
    body = node("n1")
    body["status"]["allocatable"][GPU_RESOURCE] = "999"
    info = parse_node(body, TopologyConfig())
    assert info.gpu_count == 8 and any("more than nvidia.com/gpu.count=8" in w for w in info.warnings)
    del body["metadata"]["labels"]["nvidia.com/gpu.count"]
    info = parse_node(body, TopologyConfig(max_gpus_per_node=16))
    assert info.gpu_count == 16 and any("configured maximum of 16" in w for w in info.warnings)
    kilo = node("n2", gpus=8)
    kilo["status"]["allocatable"][GPU_RESOURCE] = "1k"  # a valid quantity, capped rather than refused
    info = parse_node(kilo, TopologyConfig())
    assert info.gpu_count == 8 and not any("not a whole number" in w for w in info.warnings)


def test_empty_topology_labels_and_out_of_range_indices_are_warned() -> None:
    info = parse_node(node("n1", leaf="", unhealthy="3,9,12", product=""), TopologyConfig())
    assert any("ignored empty label nvidia.com/gpu.product" in w for w in info.warnings)
    assert info.domains[1] is None
    assert any("empty topology label network.topology.nvidia.com/leaf" in w for w in info.warnings)
    assert any("ignored GPU indices [9, 12]" in w for w in info.warnings)
    assert info.broken_gpus() == frozenset({3})


def test_nodes_keep_labels_taints_and_allocatable_resources() -> None:
    taints = [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
        {"key": "soft", "effect": "PreferNoSchedule"},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},  # expected on GPU nodes: tolerated by every job
    ]
    body = node("n1", taints=taints)
    body["status"]["allocatable"].update({"memory": "1Ti", "ephemeral-storage": "bad"})
    info = parse_node(body, TopologyConfig())
    assert info.taints == (Taint("dedicated", "ml", "NoSchedule"),)
    assert info.takes_new_work  # a NoSchedule taint closes the node only to jobs that do not tolerate it
    assert info.allocatable == {"cpu": 96_000, "memory": 2**40}
    assert any("ephemeral-storage" in w for w in info.warnings)
    assert info.labels["topology.kubernetes.io/zone"] == "zone-0"


def test_bound_pods_carry_their_requests() -> None:
    pod = foreign_pod("p", "n1", 1)
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1500m"}
    assert parse_pod(pod).requests == (("cpu", 1500),)
    pod["status"]["phase"] = "Succeeded"
    assert parse_pod(pod).requests == ()  # a finished pod holds nothing

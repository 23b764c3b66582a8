"""Node-failure repair in DRA mode (issue 13 part 2, "repairs replace the claim with the pod"): with
``failurePolicy: minimal`` only the failed node's workers move, each with a new claim allocated with exactly
its newly recorded devices, and the old claims on the failed node are gone rather than leaked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from drahelpers import assert_claims_match_placement, assert_no_device_in_two_claims, claim_devices, claims
from pjhelpers import Jobs, wait_for

from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


@pytest.fixture
def healing(dra_kube: KubeSession) -> Iterator[list[str]]:
    """Nodes a test breaks; made Ready again afterwards so the next test has the whole cluster."""
    broken: list[str] = []
    try:
        yield broken
    finally:
        for node in broken:
            dra_kube.heal_node(node)
            dra_kube.wait_node_ready(node)


def test_node_failure_minimal_replaces_only_the_failed_nodes_claims(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_namespace: str, healing: list[str]
) -> None:
    dra_pjs.create("llm", tp=4, pp=2, dp=2, failurePolicy={"strategy": "minimal"})  # 16 GPUs on 2 nodes
    before = dra_pjs.wait_phase("llm", "Running", timeout_s=60)
    assert_claims_match_placement(dra_pjs, dra_kube, "llm")
    old_slots = {p["name"]: p for p in before["placement"]["pods"]}
    old_pods = {p.metadata.name: p.metadata.uid for p in dra_pjs.live_pods("llm")}
    old_claims = {name: c["metadata"]["uid"] for name, c in claims(dra_kube, dra_namespace).items()}
    victim = before["placement"]["pods"][0]["node"]
    moved = {name for name, slot in old_slots.items() if slot["node"] == victim}
    assert moved and len(moved) < len(old_slots)

    healing.append(victim)
    dra_kube.make_node_not_ready(victim)
    after = dra_pjs.wait_phase("llm", "Running", timeout_s=60, restarts=1)
    failure = after["lastFailure"]
    assert failure["kind"] == "NodeFailure" and failure["action"] == "rescheduled" and victim in failure["nodes"]
    assert victim not in {p["node"] for p in after["placement"]["pods"]}

    # Only the victim's workers were re-created; the others keep their pods and their claims.
    new_pods = {p.metadata.name: p.metadata.uid for p in dra_pjs.live_pods("llm")}
    assert sorted(new_pods) == sorted(old_pods)
    for name, uid in old_pods.items():
        assert (new_pods[name] != uid) == (name in moved), name

    # Each claim is the worker's and allocated with exactly its newly recorded devices on its new node.
    assert_claims_match_placement(dra_pjs, dra_kube, "llm")

    def settled() -> dict[str, dict[str, object]] | None:
        # A claim of a moved worker on the failed node is deleted with the old pod and made again.
        now = claims(dra_kube, dra_namespace)
        stale = [c for c in now.values() if any(pool == victim for pool, _ in claim_devices(c))]
        return None if stale or len(now) != len(old_pods) else now

    new_claims = wait_for("no claim left on the failed node", settled, timeout_s=30)
    for name, claim in new_claims.items():
        pod = name.removesuffix("-gpus")
        assert pod in old_pods, f"claim {name} belongs to no worker"
        replaced = claim["metadata"]["uid"] != old_claims[name]
        assert replaced == (pod in moved), f"claim {name}: replaced={replaced}, its pod moved={pod in moved}"
    assert_no_device_in_two_claims(dra_kube)

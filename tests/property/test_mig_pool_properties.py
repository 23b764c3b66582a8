"""Properties of MIG slices on device-plugin nodes through the operator's pass (issue 44), over random sequences
of slice jobs, whole-GPU jobs, deletions, GPU failures and another scheduler's slice pods on two small MIG nodes
(one with whole GPUs beside) and one HGX node: after every pass, no node has more slices of a profile held (by
the operator's jobs and the other pods) than it offers, no slice is recorded on a node that does not offer its
profile, and no whole-GPU pod is on a GPU the node does not offer as ``nvidia.com/gpu``."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_mig_pools import ONE, mig_node

RESOURCE = f"nvidia.com/mig-{ONE}"
SLICES = {"mig-0": 3, "mig-1": 4}
WHOLE = {"mig-0": 0, "mig-1": 2}

actions = st.one_of(
    st.tuples(st.just("slices"), st.integers(1, 4), st.integers(0, 1)),
    st.tuples(st.just("whole"), st.integers(1, 8), st.integers(0, 1)),
    st.tuples(st.just("delete"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("break"), st.sampled_from(sorted(SLICES)), st.integers(0, 7)),
    st.tuples(st.just("heal"), st.sampled_from(sorted(SLICES)), st.just(0)),
    st.tuples(st.just("foreign"), st.sampled_from(sorted(SLICES)), st.integers(1, 2)),
)


def dp_node(name: str, unhealthy: str | None = None) -> dict[str, Any]:
    return mig_node(name, slices=SLICES[name], whole=WHOLE[name], unhealthy=unhealthy)


def recorded(cluster: FakeCluster) -> tuple[dict[str, int], set[tuple[str, str, str]], dict[str, int]]:
    """(slices the active jobs hold per MIG node, those slices as (job, pod, node), whole GPUs per node)."""
    held = dict.fromkeys(SLICES, 0)
    where: set[tuple[str, str, str]] = set()
    whole: dict[str, int] = {}
    for key, body in cluster.jobs.items():
        status = body.get("status") or {}
        if status.get("phase") not in ("Placing", "Running", "Recovering"):
            continue
        for pod in status["placement"]["pods"]:
            if "migSlice" in pod:
                assert pod["node"] in SLICES and pod["gpuIndices"] == [], (key, pod)
                held[pod["node"]] += 1
                where.add((key, pod["name"], pod["node"]))
            else:
                whole[pod["node"]] = whole.get(pod["node"], 0) + len(pod["gpuIndices"])
    return held, where, whole


def foreign(cluster: FakeCluster) -> dict[str, int]:
    out = dict.fromkeys(SLICES, 0)
    for pod in cluster.pods.values():
        if pod["metadata"].get("namespace") == "other":
            out[pod["spec"]["nodeName"]] += int(pod["spec"]["containers"][0]["resources"]["limits"][RESOURCE])
    return out


def check(cluster: FakeCluster, before: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Every node a pass placed a slice on has no more slices held (ours and the other pods') than it offers,
    and no node ever holds more of ours than it offers; whole GPUs never exceed what nvidia.com/gpu offers."""
    held, where, whole = recorded(cluster)
    others = foreign(cluster)
    for name in {at for _, _, at in where - before}:
        assert held[name] + others[name] <= SLICES[name], f"{name}: {held[name]} + {others[name]} > {SLICES[name]}"
    for name, n in held.items():
        assert n <= SLICES[name], f"{name}: {n} slices held, {SLICES[name]} offered"
    for name, gpus in whole.items():
        assert gpus <= WHOLE.get(name, 8), f"{name}: {gpus} whole GPUs used, {WHOLE.get(name, 8)} offered"
    return where


@settings(max_examples=40, deadline=None)
@given(st.lists(actions, min_size=1, max_size=12))
def test_slices_never_exceed_a_nodes_offer(steps: list[tuple[str, Any, Any]]) -> None:
    cluster = FakeCluster([dp_node("mig-0"), dp_node("mig-1"), node("hgx-0")])
    made: list[str] = []
    placed: set[tuple[str, str, str]] = set()
    for i, (what, a, b) in enumerate(steps):
        name = f"j{i}"
        if what == "slices":
            policy = {"max_restarts": 1} if b else {}
            spec = {"gpuSharing": {"migProfile": ONE}}
            cluster.add_job(paralleljob(name, tp=1, pp=1, dp=a, memory=0, extra_spec=spec, **policy))
            made.append(name)
        elif what == "whole":
            body = paralleljob(name, tp=a, pp=1, dp=1, memory=0)
            if b:
                body["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "mig-1"}
            cluster.add_job(body)
            made.append(name)
        elif what == "delete" and made:
            cluster.jobs.pop(f"ns/{made[a % len(made)]}", None)
        elif what == "break":
            cluster.nodes[a] = dp_node(a, str(b))
        elif what == "heal":
            cluster.nodes[a] = dp_node(a)
        elif what == "foreign":
            # another scheduler's pod takes slices there (it may overcommit the node itself: that is its doing)
            limits = {RESOURCE: str(b)}
            cluster.pods[("other", name)] = {
                "metadata": {"name": name, "namespace": "other", "uid": f"uid-{name}"},
                "spec": {"nodeName": a, "containers": [{"name": "c", "resources": {"limits": limits}}]},
                "status": {"phase": "Running"},
            }
        for _ in range(3):
            cluster.step()
            placed = check(cluster, placed)

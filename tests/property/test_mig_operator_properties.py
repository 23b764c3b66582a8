"""Properties of MIG slices through the operator's pass (issue 44), over random sequences of slice jobs,
whole-GPU jobs, deletions and GPU failures on a cluster of one DRA node set up for MIG and one HGX node:
after every pass, no GPU holds a whole-GPU job and a slice at once, the slices on a GPU never share a memory
slice nor take more than its seven compute slices, and every recorded slice is a MIG device its node publishes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.slices.mig import COMPUTE_SLICES, GPU_80GB
from paralleljob.k8s.edge.config import TopologyConfig
from tests.k8s import harness
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.migworld import MIG_NODE, dra_node, mig_overlay

MIG = MIG_NODE
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb")


actions = st.one_of(
    st.tuples(st.just("slices"), st.sampled_from(PROFILES), st.integers(1, 4)),
    st.tuples(st.just("whole"), st.integers(1, 8), st.booleans()),  # pinned to the MIG node or not
    st.tuples(st.just("delete"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("break"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("heal"), st.just(0), st.just(0)),
)


def check(cluster: FakeCluster) -> None:
    whole: set[int] = set()
    slices: dict[int, list[tuple[str, int]]] = {}
    offer = harness.parse_node(cluster.nodes[MIG], TopologyConfig()).mig
    assert offer is not None
    for key, body in cluster.jobs.items():
        status = body.get("status") or {}
        if status.get("phase") not in ("Placing", "Running", "Recovering"):
            continue
        for pod in status["placement"]["pods"]:
            if pod["node"] != MIG:
                continue
            if "migSlice" in pod:
                (gpu,) = pod["gpuIndices"]
                grant = pod["migSlice"]
                assert offer.gpus[gpu].device(grant["profile"], grant["start"]) is not None, (key, pod)
                slices.setdefault(gpu, []).append((grant["profile"], grant["start"]))
            else:
                whole.update(pod["gpuIndices"])
    assert not whole & set(slices), f"GPUs held whole and sliced: {whole & set(slices)}"
    for gpu, held in slices.items():
        memory = [m for name, start in held for m in range(start, start + GPU_80GB.profile(name).memory_slices)]
        assert len(memory) == len(set(memory)), f"GPU {gpu}: slices overlap {held}"
        assert sum(GPU_80GB.profile(name).compute_slices for name, _ in held) <= COMPUTE_SLICES, (gpu, held)


@settings(max_examples=50, deadline=None)
@given(st.lists(actions, min_size=1, max_size=12))
def test_slices_and_whole_gpus_never_meet(steps: list[tuple[str, Any, Any]]) -> None:
    with mig_overlay():
        cluster = FakeCluster([dra_node(MIG), node("hgx-1")])
        made: list[str] = []
        for i, (what, a, b) in enumerate(steps):
            name = f"j{i}"
            if what == "slices":
                spec = {"gpuSharing": {"migProfile": a}}
                cluster.add_job(paralleljob(name, tp=1, pp=1, dp=b, memory=0, max_restarts=1, extra_spec=spec))
                made.append(name)
            elif what == "whole":
                body = paralleljob(name, tp=a, pp=1, dp=1, memory=0)
                if b:
                    body["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": MIG}
                cluster.add_job(body)
                made.append(name)
            elif what == "delete" and made:
                cluster.jobs.pop(f"ns/{made[a % len(made)]}", None)
            elif what == "break":
                cluster.nodes[MIG] = dra_node(MIG, str(a))
            elif what == "heal":
                cluster.nodes[MIG] = dra_node(MIG)
            for _ in range(3):
                cluster.step()
                check(cluster)

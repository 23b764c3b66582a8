"""Properties of MPS shares through the operator's pass (issue 44 item 2), over random sequences of share jobs
(two namespaces, several sizes, several ranks), MIG slice jobs, whole-GPU jobs, deletions and GPU failures on a
cluster of one DRA node and one HGX node: after every pass, no GPU holds shares together with a whole-GPU job
or a MIG slice, the shares on a GPU are of one namespace and one percent and never add up to more than the
GPU, and every share's pod references the claim of its GPU, namespace and percent."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.k8s.edge.render.mpsclaims import mps_claim_name
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.migworld import MIG_NODE, dra_node, mig_overlay

DRA = MIG_NODE

actions = st.one_of(
    st.tuples(st.just("shares"), st.sampled_from(["ns", "ns2"]), st.sampled_from([10, 25, 33, 50]), st.integers(1, 5)),
    st.tuples(st.just("slices"), st.just("ns"), st.just(0), st.integers(1, 3)),
    st.tuples(st.just("whole"), st.just("ns"), st.integers(1, 8), st.booleans()),  # pinned to the DRA node or not
    st.tuples(st.just("delete"), st.just(""), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("break"), st.just(""), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("heal"), st.just(""), st.just(0), st.just(0)),
)


def check(cluster: FakeCluster) -> None:
    whole: set[int] = set()
    sliced: set[int] = set()
    shares: dict[int, list[tuple[str, int]]] = {}
    for key, body in cluster.jobs.items():
        status = body.get("status") or {}
        if status.get("phase") not in ("Placing", "Running", "Recovering"):
            continue
        namespace = key.partition("/")[0]
        for pod in status["placement"]["pods"]:
            if pod["node"] != DRA:
                continue
            if "mpsShare" in pod:
                (gpu,) = pod["gpuIndices"]
                shares.setdefault(gpu, []).append((namespace, pod["mpsShare"]["percent"]))
            elif "migSlice" in pod:
                sliced.update(pod["gpuIndices"])
            else:
                whole.update(pod["gpuIndices"])
    assert not whole & set(shares), f"GPUs held whole and by MPS shares: {whole & set(shares)}"
    assert not sliced & set(shares), f"GPUs sliced by MIG and shared by MPS: {sliced & set(shares)}"
    for gpu, held in shares.items():
        assert len(set(held)) == 1, f"GPU {gpu}: shares of two namespaces or sizes {held}"
        assert sum(percent for _, percent in held) <= 100, f"GPU {gpu} over-filled: {held}"
    for key, pods in ((k, cluster.job_pods(k)) for k in cluster.jobs):
        for pod in pods:
            claims = pod["spec"].get("resourceClaims") or []
            slot = pod["metadata"].get("annotations", {}).get("paralleljob.dev/gpu-indices")
            if not claims or not slot or not claims[0]["resourceClaimName"].startswith("paralleljob-mps-"):
                continue
            status = cluster.jobs[key].get("status") or {}
            percent = (cluster.jobs[key]["spec"].get("gpuSharing") or {}).get("mps", {}).get("percent")
            wanted = mps_claim_name(pod["spec"].get("nodeName") or DRA, int(slot.split(",")[0]), percent)
            if status.get("phase") in ("Placing", "Running") and pod["spec"].get("nodeName") == DRA:
                assert claims[0]["resourceClaimName"] == wanted, (key, pod["metadata"]["name"])


@settings(max_examples=40, deadline=None)
@given(st.lists(actions, min_size=1, max_size=12))
def test_shares_never_overfill_mix_or_meet_whole_gpus_and_slices(steps: list[tuple[str, str, Any, Any]]) -> None:
    with mig_overlay():
        cluster = FakeCluster([dra_node(DRA), node("hgx-1")])
        made: list[str] = []
        for i, (what, namespace, a, b) in enumerate(steps):
            name = f"j{i}"
            if what == "shares":
                spec = {"gpuSharing": {"mps": {"percent": a}}}
                body = paralleljob(
                    name, tp=1, pp=1, dp=b, memory=0, namespace=namespace, max_restarts=1, extra_spec=spec
                )
                cluster.add_job(body)
                made.append(f"{namespace}/{name}")
            elif what == "slices":
                spec = {"gpuSharing": {"migProfile": "1g.10gb"}}
                cluster.add_job(paralleljob(name, tp=1, pp=1, dp=b, memory=0, max_restarts=1, extra_spec=spec))
                made.append(f"ns/{name}")
            elif what == "whole":
                body = paralleljob(name, tp=a, pp=1, dp=1, memory=0)
                if b:
                    body["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": DRA}
                cluster.add_job(body)
                made.append(f"ns/{name}")
            elif what == "delete" and made:
                cluster.jobs.pop(made[a % len(made)], None)
            elif what == "break":
                cluster.nodes[DRA] = dra_node(DRA, str(a))
            elif what == "heal":
                cluster.nodes[DRA] = dra_node(DRA)
            for _ in range(3):
                cluster.step()
                check(cluster)

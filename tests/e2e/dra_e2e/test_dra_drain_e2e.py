"""``paralleljob drain`` on DRA nodes against the real API server (the issue's item 5): the nodes publish no
``nvidia.com/gpu``, their GPUs are ResourceSlice devices. ``drain --gpu NODE:IDX`` marks that device's index,
the operator moves the pod on it, and no ``MalformedLabel`` warning is posted for the valid index;
``drain NODE`` cordons the node and marks every device of its pool; ``undrain`` gives both back.
"""

from __future__ import annotations

import contextlib
import io
import time
from typing import Any

import pytest
from pjhelpers import Jobs, wait_for

from paralleljob.agent.signals import DRAINED_GPUS_ANNOTATION, UNHEALTHY_GPUS_ANNOTATION
from paralleljob.cli import main
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession

pytestmark = pytest.mark.e2e


def _cli(cluster: DevCluster, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([*args, "--kubeconfig", str(cluster.kubeconfig)])
    return code, out.getvalue()


def _node(kube: KubeSession, name: str) -> Any:
    return kube.run(kube.core.read_node(name))


def _malformed(kube: KubeSession, node: str) -> list[str]:
    selector = f"involvedObject.kind=Node,involvedObject.name={node},reason=MalformedLabel"
    listed = kube.run(kube.core.list_event_for_all_namespaces(field_selector=selector))
    return [e.message for e in listed.items]


def test_drain_a_gpu_and_a_whole_dra_node(
    dra_pjs: Jobs, dra_kube: KubeSession, dra_cluster: DevCluster, dra_namespace: str
) -> None:
    dra_pjs.create("drained", tp=2, pp=1, dp=2, failurePolicy={"strategy": "minimal"})
    before = dra_pjs.wait_phase("drained", "Running", timeout_s=60)
    victim = before["placement"]["pods"][0]
    node, gpu = victim["node"], victim["gpuIndices"][-1]
    assert "nvidia.com/gpu" not in (_node(dra_kube, node).status.allocatable or {}), "not a DRA node"
    other = next(n for n in dra_cluster.nodes if n not in {p["node"] for p in before["placement"]["pods"]})
    try:
        code, out = _cli(dra_cluster, "drain", "--now", "--gpu", f"{node}:{gpu}")
        assert code == 0, out
        annotations = _node(dra_kube, node).metadata.annotations or {}
        assert annotations[UNHEALTHY_GPUS_ANNOTATION] == str(gpu) == annotations[DRAINED_GPUS_ANNOTATION]

        def moved() -> dict[str, Any] | None:
            status = dra_pjs.status("drained")
            return status if status.get("phase") == "Running" and status.get("lastDrain") else None

        after = wait_for("the pod moved off the drained DRA GPU", moved, timeout_s=120)
        # drain --now: moved at once, and still maintenance, not a GPUFailure (issue 38)
        assert after["lastDrain"]["kind"] == "Drained" and after.get("restarts", 0) == 0
        for pod in after["placement"]["pods"]:
            assert not (pod["node"] == node and gpu in pod["gpuIndices"]), f"{pod['name']} still on {node}/{gpu}"
        time.sleep(1.0)  # node events are posted in the background: give a wrong one time to land
        assert not _malformed(dra_kube, node), "a valid DRA GPU index must not be reported as malformed"

        code, out = _cli(dra_cluster, "drain", other)
        assert code == 0, out
        drained = _node(dra_kube, other)
        assert drained.spec.unschedulable
        assert drained.metadata.annotations[UNHEALTHY_GPUS_ANNOTATION] == "0,1,2,3,4,5,6,7"
        code, out = _cli(dra_cluster, "drain", "--gpu", f"{other}:8")
        assert code != 0 and "has 8 DRA devices of gpu.nvidia.com (indices 0-7); no GPU 8" in out, out
    finally:
        _cli(dra_cluster, "undrain", "--gpu", f"{node}:{gpu}")
        _cli(dra_cluster, "undrain", other)
    back = _node(dra_kube, other)
    assert not back.spec.unschedulable and not (back.metadata.annotations or {}).get(UNHEALTHY_GPUS_ANNOTATION)
    wait_for(
        f"{node}'s annotation cleared",
        lambda: not (_node(dra_kube, node).metadata.annotations or {}).get(UNHEALTHY_GPUS_ANNOTATION),
        timeout_s=60,
    )
    assert not _malformed(dra_kube, node) and not _malformed(dra_kube, other)
    dra_pjs.delete("drained")

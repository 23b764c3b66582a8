"""Pod groups on real nodes: the Indexed Job example (deploy/examples/pod-groups/indexed-job.yaml), its
pods gang-placed by the operator and run by kubelets; the Job controller's completion index is the
worker's ``--node-rank`` and the Job completes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import BatchV1Api, CustomObjectsApi
from pjhelpers import Jobs, wait_for
from realhelpers import RealCluster, pod_log

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "pod-groups" / "indexed-job.yaml"


def scaled_to_real_nodes(job: dict[str, Any], image: str) -> dict[str, Any]:
    """The example as written, shrunk to TP2xPP2xDP1 (two real nodes of 4 GPUs) and running our worker with
    the same torchrun flags in place of torchrun."""
    job = copy.deepcopy(job)
    spec, pod = job["spec"], job["spec"]["template"]
    spec["completions"] = spec["parallelism"] = 2
    pod["metadata"]["annotations"]["paralleljob.dev/parallelism"] = "TP2xPP2xDP1"
    pod["spec"]["nodeSelector"] = {"paralleljob.dev/real-node": "true"}
    container = pod["spec"]["containers"][0]
    torchrun = container["command"]
    assert torchrun[0] == "torchrun" and "--node-rank=$(JOB_COMPLETION_INDEX)" in torchrun
    flags = [f for f in torchrun[1:] if f.startswith("--") and not f.startswith(("--tensor", "--pipeline"))]
    flags = [f.replace("--nnodes=4", "--nnodes=2").replace("--nproc-per-node=4", "--nproc-per-node=2") for f in flags]
    container.update(
        image=image,
        imagePullPolicy="Never",
        command=["python3", "/opt/paralleljob/worker.py", *flags,
                 "--tensor-model-parallel-size=2", "--pipeline-model-parallel-size=2"],
        resources={"limits": {"nvidia.com/gpu": "2"}},
    )  # fmt: skip
    return job


def test_indexed_job_example_runs_for_real(real_cluster: RealCluster, real_pjs: Jobs) -> None:
    kube, namespace = real_pjs.kube, real_pjs.namespace
    service, job = list(yaml.safe_load_all(EXAMPLE.read_text()))
    kube.run(kube.core.create_namespaced_service(namespace, service))
    batch: Any = BatchV1Api(kube.api)
    kube.run(batch.create_namespaced_job(namespace, scaled_to_real_nodes(job, real_cluster.worker_image)))

    def complete() -> bool:
        status = kube.run(batch.read_namespaced_job("llm-pretrain", namespace)).status
        return bool(status.succeeded == 2 or status.failed)

    wait_for("the Indexed Job finished", complete, timeout_s=150, interval=0.5)
    pods = kube.run(kube.core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name")).items
    logs = {p.metadata.name: pod_log(real_cluster.cluster, namespace, p.metadata.name, "trainer") for p in pods}
    final = kube.run(batch.read_namespaced_job("llm-pretrain", namespace)).status
    assert final.succeeded == 2 and not final.failed, logs
    summaries = {}
    for pod in pods:
        terminated = pod.status.container_statuses[0].state.terminated
        summary = json.loads(terminated.message)
        index = int(pod.metadata.annotations["batch.kubernetes.io/job-completion-index"])
        assert summary["nodeRank"] == index and summary["problems"] == [], summary
        summaries[index] = (pod.spec.node_name, summary)
    assert {node for node, _ in summaries.values()} <= {"real-node-0", "real-node-1"}
    # The operator's ParallelJob for the group records the placement the pods ran on.
    custom: Any = CustomObjectsApi(kube.api)
    group = kube.run(
        custom.get_namespaced_custom_object("paralleljob.dev", "v1alpha1", namespace, "paralleljobs", "llm-pretrain")
    )
    recorded = {p["nodeRank"]: p["node"] for p in group["status"]["placement"]["pods"]}
    assert recorded == {index: node for index, (node, _) in summaries.items()}

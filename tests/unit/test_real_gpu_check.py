"""The by-hand GPU check (tests/byhand/real_gpu_check.py) must keep working where no GPU is: its offline part
(the operator's pass deciding the one-GPU job whose env torchrun gets) runs here, so the script cannot rot
between the rare runs on a lent GPU machine."""

from __future__ import annotations

from tests.byhand.real_gpu_check import one_gpu_pods


def test_one_gpu_job_gets_a_bound_worker_with_torchruns_env() -> None:
    pods = one_gpu_pods()["items"]
    assert len(pods) == 1
    pod = pods[0]
    assert pod["spec"]["nodeName"] == "gpu-node-000"
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WORLD_SIZE"] == "1" and env["PET_NNODES"] == "1" and env["PET_NPROC_PER_NODE"] == "1"
    assert env["PJ_RANK_ORDER"] == "tp-dp-pp" and env["PJ_GPU_INDICES"] == "0"
    assert env["PET_RDZV_BACKEND"] == "static"

"""The by-hand check on a real NVIDIA GPU machine (no cluster needed): what CI cannot run.

    PYTHONPATH=operator:. python3 tests/byhand/real_gpu_check.py [--torchrun torchrun] [--out DIR]

1. ``paralleljob agent --once`` against the real NVML: readings and the verdict the agent would write.
2. The XID path: the real ``PynvmlSource`` subscribes to XID events, a child process runs a CUDA kernel that
   writes through a bad pointer (an application fault: the driver raises XID 13/31/43), the events are fed to
   the agent's ``Monitor`` and must change no GPU's state (application XIDs leave the gang alone).
3. The rank check on NCCL: a one-GPU ParallelJob is decided by the operator's own pass (the in-memory API of
   ``tests/k8s/harness.py``), its worker pod's env written as ``kubectl get pods -o json`` would show it, and
   ``deploy/examples/train/run_local.py`` starts ``torchrun train.py`` with that env: on a GPU, train.py
   initialises NCCL, builds its mesh and runs its data-parallel steps there.
4. Two ranks of one job on the same GPU with NCCL (what a single-GPU machine cannot check): recorded, expected
   to be refused by NCCL.
5. ``agent --once`` again while a matrix-product loop holds the GPU: utilisation and power as NVML reports them.

Each section prints what it saw; the exit code is non-zero when a section that must pass did not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BAD_KERNEL = r"""
import cupy as cp
kernel = cp.RawKernel(r'extern "C" __global__ void bad(int* p) { *((int*)0x10) = 1; p[0] = 2; }', "bad")
kernel((1,), (1,), (cp.zeros(1, dtype=cp.int32),))
cp.cuda.Device().synchronize()
"""
BUSY_LOOP = r"""
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def section(title: str) -> None:
    print(f"\n===== {title} =====", flush=True)


def agent_once() -> dict:
    code = "import sys; from paralleljob.cli import main; sys.exit(main(['agent', '--once', '--node', 'gpu-check']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    print(done.stdout[-6000:], done.stderr[-2000:], f"exit {done.returncode}", sep="\n", flush=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def xid_path() -> bool:
    from paralleljob.agent.monitor import Monitor
    from paralleljob.agent.pynvml_source import PynvmlSource
    from paralleljob.agent.xid import classify_xid

    source = PynvmlSource()
    source.open()
    try:
        print("XID event set:", "registered" if source.event_set is not None else "unavailable", flush=True)
        monitor = Monitor()
        before = monitor.step(source.sample(), source.wait_xids(0.0), 0.0)
        child = subprocess.run([sys.executable, "-c", BAD_KERNEL], capture_output=True, text=True, timeout=120)
        print("bad kernel exit", child.returncode, "|", (child.stderr.strip().splitlines() or [""])[-1], flush=True)
        xids = []
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline and not xids:
            xids = source.wait_xids(1.0)
        print("XIDs seen:", [(x.gpu, x.code, classify_xid(x.code).xid_class.value) for x in xids], flush=True)
        after = monitor.step(source.sample(), xids, 1.0)
        states = {i: (before.tracks[i].state.value, t.state.value) for i, t in after.tracks.items()}
        print("GPU states before -> after:", states, flush=True)
        unchanged = all(b == a for b, a in states.values())
        return bool(xids) and unchanged and child.returncode != 0
    finally:
        source.close()


def one_gpu_pods() -> dict:
    from tests.k8s.factories import node, paralleljob
    from tests.k8s.harness import FakeCluster

    cluster = FakeCluster([node("gpu-node-000", gpus=1, product="NVIDIA-H200")])
    container = {"name": "train", "image": "example/train:1", "command": ["torchrun", "train.py"]}
    template = {"spec": {"containers": [container]}}
    cluster.add_job(paralleljob("rank-check", 1, 1, 1, memory=1.0, extra_spec={"template": template}))
    cluster.settle()
    return {"items": cluster.job_pods("ns/rank-check")}


def rank_check(torchrun: str, out: Path) -> bool:
    pods = one_gpu_pods()
    path = out / "pods.json"
    path.write_text(json.dumps(pods))
    for pod in pods["items"]:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        print(pod["metadata"]["name"], "on", pod["spec"].get("nodeName"), {k: env[k] for k in sorted(env)}, flush=True)
    script = ROOT / "deploy/examples/train/run_local.py"
    done = subprocess.run(
        [sys.executable, str(script), str(path), "--torchrun", torchrun], capture_output=True, text=True, timeout=300
    )
    print(done.stdout[-4000:], done.stderr[-3000:], f"exit {done.returncode}", sep="\n", flush=True)
    return done.returncode == 0


def two_ranks_one_gpu() -> None:
    code = (
        "import os, torch, torch.distributed as dist; torch.cuda.set_device(0); dist.init_process_group('nccl');"
        " t = torch.ones(1, device='cuda'); dist.all_reduce(t); print('rank', dist.get_rank(), 'sum', t.item())"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", f.name],
        capture_output=True,
        text=True,
        timeout=180,
    )
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "NCCL" in ln or "rank" in ln or "Error" in ln]
    print("\n".join(lines[-12:]), f"exit {done.returncode}", sep="\n", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torchrun", default="torchrun")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    section("1. agent --once (idle)")
    if not agent_once():
        failed.append("agent --once")
    section("2. XID path: an application fault on the GPU")
    if not xid_path():
        failed.append("xid path")
    section("3. rank check on NCCL (one-GPU job, the operator's env)")
    if not rank_check(args.torchrun, args.out):
        failed.append("rank check")
    section("4. two ranks on one GPU with NCCL")
    two_ranks_one_gpu()
    section("5. agent --once under load")
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, "20"])
    time.sleep(8)
    loaded = agent_once()
    busy.wait(timeout=60)
    gpus = loaded.get("sample", {}).get("gpus") or [{}]
    fields = ("utilization_pct", "memory_utilization_pct", "power_w", "temperature_c")
    print("under load:", {k: gpus[0].get(k) for k in fields}, flush=True)
    print("\nFAILED: " + ", ".join(failed) if failed else "\nall sections passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

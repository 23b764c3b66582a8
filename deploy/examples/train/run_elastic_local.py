"""Grow an elastic ParallelJob from 2 to 3 replicas and shrink it back, on this machine, with real torchrun
(CPU, gloo): one `torchrun elastic_train.py` per pod, each with the environment the operator's own
``worker_env`` gives that pod (only the rendezvous host is pointed at 127.0.0.1: no cluster DNS here).

    .venv/bin/python deploy/examples/train/run_elastic_local.py --torchrun /path/to/torch-venv/bin/torchrun

The job is TP2 x PP2 x DP 2..3 (minData 2, maxData 3): four pods (torchrun nodes) of two processes, then a
third replica's two pods join (torchrun restarts the group with 12 ranks; a join is not a restart that
counts), then they are killed as a dropped replica is (the survivors' collectives fail, they restart once
and meet again with 8 ranks). Prints every round's summary from elastic_train.py; exits non-zero if a round
reports a mismatch or the world sizes are not 8, 12, 8.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render.manifests import worker_env
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, pod_name

HERE = Path(__file__).resolve().parent
TP, PP = 2, 2


def job_object() -> object:
    body = {
        "apiVersion": "paralleljob.dev/v1alpha1",
        "kind": "ParallelJob",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "u1", "generation": 1, "resourceVersion": "1"},
        "spec": {
            "parallelism": {"tensor": TP, "pipeline": PP, "data": 3, "minData": 2, "maxData": 3},
            "template": {"spec": {"containers": [{"name": "train", "image": "t"}]}},
        },
    }
    return parse_job(body)


def record(replicas: int):  # type: ignore[no-untyped-def]
    job = job_object()
    assert job.request is not None  # type: ignore[attr-defined]
    slots = [
        PodSlot(pod_name("demo", d, p), d, p, "local", tuple(range(TP)), 1) for d in range(replicas) for p in range(PP)
    ]
    return job, PlacementRecord(1, "seed", TP, PP, replicas, tuple(slots), job.request.rank_order)  # type: ignore[attr-defined]


def launch(
    torchrun: str, replicas: int, replica: int, port: int, stop: Path, out: list[str]
) -> list[subprocess.Popen[str]]:
    job, rec = record(replicas)
    procs = []
    for slot in rec.slots[replica * PP : (replica + 1) * PP]:
        env = {e["name"]: e["value"] for e in worker_env(job, rec, slot, 0)}  # type: ignore[arg-type]
        shown = {k: env[k] for k in ("PET_NNODES", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT",
                                     "PET_MAX_RESTARTS", "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS", "PJ_PP_RANK")}
        print(f"pod {slot.name}: {shown}", flush=True)
        env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{port}"
        env.update(OMP_NUM_THREADS="1", STOP_FILE=str(stop), PATH=os.environ["PATH"])
        proc = subprocess.Popen(
            [torchrun, "--monitor-interval", "1", str(HERE / "elastic_train.py")],
            env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        log = stop.parent / f"{slot.name}.log"  # the launcher's whole output, for when a round does not come
        threading.Thread(target=_collect, args=(proc, out, log), daemon=True).start()
        procs.append(proc)
    return procs


def _collect(proc: subprocess.Popen[str], out: list[str], log: Path) -> None:
    assert proc.stdout is not None
    with log.open("w") as sink:
        for line in proc.stdout:
            sink.write(line)
            sink.flush()
            if line.startswith("round ") or "MISMATCH" in line:
                print(line.rstrip(), flush=True)
                out.append(line)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (torchrun starts each worker in a session of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def wait_world(out: list[str], world: int, after: int, timeout_s: float = 180) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i, line in enumerate(out[after:], after):
            if f" world={world} " in line:
                return i + 1
        time.sleep(0.2)
    raise SystemExit(f"no round with world={world} within {timeout_s:.0f} s")


def no_torchrun(prog: str, torchrun: str) -> int:
    print(
        f"{prog}: no torchrun at {torchrun!r}: this needs PyTorch, which is not among the project's dependencies;"
        " install it into a virtualenv of its own (python -m venv torch-venv && torch-venv/bin/pip install torch)"
        " and pass --torchrun torch-venv/bin/torchrun",
        file=sys.stderr,
    )
    return 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torchrun", default="torchrun")
    parser.add_argument("--port", type=int, default=29611)
    args = parser.parse_args()
    if shutil.which(args.torchrun) is None:  # a traceback from Popen would not say what to do
        return no_torchrun(parser.prog, args.torchrun)
    stop = Path(tempfile.mkdtemp()) / "stop"
    print(f"launcher logs in {stop.parent}", flush=True)
    out: list[str] = []
    started = time.monotonic()
    print("== 2 replicas (4 pods)", flush=True)
    base = [p for d in range(2) for p in launch(args.torchrun, 2, d, args.port, stop, out)]
    seen = wait_world(out, TP * PP * 2, 0)
    print(f"== replica 2 joins ({time.monotonic() - started:.0f} s)", flush=True)
    grown = launch(args.torchrun, 3, 2, args.port, stop, out)
    seen = wait_world(out, TP * PP * 3, seen)
    print(f"== replica 2 dropped: its pods killed ({time.monotonic() - started:.0f} s)", flush=True)
    for proc in grown:  # as the kubelet does when a pod goes: the launcher and its workers (own sessions)
        workers = children(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
    seen = wait_world(out, TP * PP * 2, seen)
    stop.touch()
    codes = [proc.wait(timeout=120) for proc in base]
    print(f"== done in {time.monotonic() - started:.0f} s; survivors' launchers exited {codes}", flush=True)
    bad = [line for line in out if "MISMATCH" in line]
    return 1 if bad or any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())

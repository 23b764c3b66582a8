"""Run a placed ParallelJob's workers on this machine, one `torchrun train.py` per pod, each with exactly the
environment the operator gave that pod (MASTER_ADDR pointed at 127.0.0.1): the way to check, without GPUs
or a real cluster, that the framework forms the groups the placer chose.

    kubectl get pods -l paralleljob.dev/job=llama-70b -o json > pods.json
    python deploy/examples/train/run_local.py pods.json --torchrun .venv-torch/bin/torchrun

It prints every rank's line (see train.py) sorted by rank and exits non-zero if any rank reports a
mismatch or a launcher fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCAL = {"MASTER_ADDR", "PET_MASTER_ADDR"}


def pod_envs(pods: dict) -> list[tuple[str, dict[str, str]]]:
    out = []
    for pod in pods["items"]:
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container.get("env") or [] if "value" in e}
        out.append((pod["metadata"]["name"], env))
    return sorted(out, key=lambda item: int(item[1]["NODE_RANK"]))


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
    parser.add_argument("pods", help="`kubectl get pods -o json` of one job's workers")
    parser.add_argument("--torchrun", default="torchrun")
    parser.add_argument("--port", type=int, default=29500)
    args = parser.parse_args()
    if shutil.which(args.torchrun) is None:  # a traceback from Popen would not say what to do
        return no_torchrun(parser.prog, args.torchrun)
    envs = pod_envs(json.loads(Path(args.pods).read_text()))
    launchers = []
    for name, pod_env in envs:
        env = {**os.environ, **pod_env, "MASTER_PORT": str(args.port), "PET_MASTER_PORT": str(args.port)}
        env.update({key: "127.0.0.1" for key in LOCAL})
        env.setdefault("OMP_NUM_THREADS", "1")
        print(
            f"pod {name}: NODE_RANK={pod_env['NODE_RANK']} PJ_DP_RANK={pod_env['PJ_DP_RANK']} "
            f"PJ_PP_RANK={pod_env['PJ_PP_RANK']} PJ_RANK_ORDER={pod_env['PJ_RANK_ORDER']}",
            flush=True,
        )
        launchers.append(
            subprocess.Popen(
                [args.torchrun, str(HERE / "train.py")],
                env=env,
                cwd=HERE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    lines, failed = [], False
    for proc in launchers:
        out, _ = proc.communicate(timeout=600)
        failed |= proc.returncode != 0
        lines += [line for line in out.splitlines() if re.match(r"^rank +\d+ ", line)]
        if proc.returncode != 0:
            print(out, file=sys.stderr)
    for line in sorted(lines, key=lambda line: int(line.split()[1])):
        print(line)
    bad = [line for line in lines if "MISMATCH" in line]
    print(f"{len(lines)} ranks reported, {len(bad)} mismatches, launchers {'failed' if failed else 'ok'}")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The test worker image's rendezvous (deploy/worker/worker.py), run as local processes on loopback: a pod
that starts more than 5 s after the first must still find every rank waiting for it. The 5 s connect
timeout used to stay on the socket while a rank waited for the master's table, so the early pod's ranks
gave up ("only 0 of 2 local ranks finished the rendezvous") while the others succeeded, and the real-node
TP2xPP2xDP2 test failed now and then."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

WORKER = Path(__file__).resolve().parents[2] / "deploy" / "worker" / "worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(node_rank: int, port: int) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PJ_TP_SIZE": "1", "PJ_PP_SIZE": "1", "PJ_DP_SIZE": "2", "PJ_NPROC_PER_NODE": "1",
        "NODE_RANK": str(node_rank), "WORLD_SIZE": "2", "PJ_RANK_ORDER": "tp-dp-pp",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PJ_POD_NAME": f"w-d{node_rank}-p0",
        "PARALLELJOB_FAKE_GPU_IDS": "gpu-0", "WORKER_TIMEOUT_S": "30",
    }  # fmt: skip
    return subprocess.Popen([sys.executable, str(WORKER)], env=env, stdout=subprocess.PIPE, text=True)


def test_a_pod_started_well_after_the_first_still_completes_everyones_rendezvous() -> None:
    port = free_port()
    first = start(0, port)
    time.sleep(6.5)  # longer than the 5 s connect timeout
    second = start(1, port)
    outs = [p.communicate(timeout=40)[0] for p in (first, second)]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    assert [s["problems"] for s in summaries] == [[], []], summaries
    assert [first.returncode, second.returncode] == [0, 0]
    assert sorted(r for s in summaries for r in s["ranks"]) == [0, 1]

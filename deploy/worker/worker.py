"""A stand-in trainer for the real-node tests: what a framework does with the environment ParallelJob gives.

Each pod runs ``PJ_NPROC_PER_NODE`` local ranks (threads, one per GPU of its TP group). Global rank =
``NODE_RANK * nproc + local rank``, as torchrun numbers them. Every rank derives its TP, PP and DP groups
from its global rank alone, by ``PJ_RANK_ORDER``, the way Megatron-LM does (this file has its own copy of
that arithmetic on purpose: it must not trust ParallelJob's). The pod with node rank 0 listens on
``MASTER_PORT``; every rank resolves ``MASTER_ADDR`` (the headless Service's DNS name), connects, and sends
what it knows (rank, pod, stage, replica, its GPUs as the device plugin gave them, its IP); when all
``WORLD_SIZE`` ranks are in, the master sends the whole table back to each. Then every rank checks:

- the table holds exactly ranks 0..WORLD_SIZE-1, each once;
- its pod's stage and replica (``PJ_PP_RANK``, ``PJ_DP_RANK``) are the ones its rank implies;
- its TP group is exactly the ranks of its own pod, its PP and DP groups are ranks of the stages and
  replicas they must be, and the GPUs of its pod are ``PJ_NPROC_PER_NODE`` distinct devices.

A summary goes to the termination message (``/dev/termination-log``), which the pod's status carries, so a
test compares it with the job's status without reading logs. Exit 0 when every check passes, 1 otherwise.
``WORKER_FAIL_NODE_RANK`` + ``WORKER_FAIL_INCARNATION`` make one pod incarnation exit 3 on purpose.

Given torchrun's flags instead (``--nnodes --nproc-per-node --node-rank --master-addr --master-port``, plus
``--tensor-model-parallel-size`` and ``--pipeline-model-parallel-size`` as Megatron-LM takes them), it runs
where no ParallelJob env exists: a pod group's pods (an Indexed Job's completion index as the node rank).
Stage and replica then come from the rank alone, so only the rendezvous and the groups are checked.
"""

import argparse

import json
import os
import socket
import sys
import threading
import time

env = dict(os.environ)
_flags = argparse.ArgumentParser()
for _flag in ("nnodes", "nproc-per-node", "node-rank", "master-addr", "master-port",
              "tensor-model-parallel-size", "pipeline-model-parallel-size", "rank-order"):
    _flags.add_argument(f"--{_flag}")
_given = _flags.parse_args()
if _given.nnodes:  # torchrun-style flags: derive the ParallelJob variables a pod group's pod lacks
    _tp, _pp = int(_given.tensor_model_parallel_size), int(_given.pipeline_model_parallel_size)
    _world = int(_given.nnodes) * int(_given.nproc_per_node)
    env.update(
        PJ_TP_SIZE=str(_tp), PJ_PP_SIZE=str(_pp), PJ_DP_SIZE=str(_world // (_tp * _pp)),
        PJ_NPROC_PER_NODE=_given.nproc_per_node, NODE_RANK=_given.node_rank, WORLD_SIZE=str(_world),
        PJ_RANK_ORDER=_given.rank_order or "tp-dp-pp", MASTER_ADDR=_given.master_addr,
        MASTER_PORT=_given.master_port, PJ_POD_NAME=socket.gethostname(),
    )
TP, PP, DP = int(env["PJ_TP_SIZE"]), int(env["PJ_PP_SIZE"]), int(env["PJ_DP_SIZE"])
NPROC, NODE_RANK, WORLD = int(env["PJ_NPROC_PER_NODE"]), int(env["NODE_RANK"]), int(env["WORLD_SIZE"])
ORDER = env["PJ_RANK_ORDER"]
MASTER, PORT = env["MASTER_ADDR"], int(env["MASTER_PORT"])
POD = env["PJ_POD_NAME"]
GPUS = [g for g in env.get("PARALLELJOB_FAKE_GPU_IDS", "").split(",") if g]
DEADLINE = time.monotonic() + float(env.get("WORKER_TIMEOUT_S", "120"))


def coordinates(rank):
    """(replica, stage, tp rank) of a global rank, by the rank order's nesting (innermost first)."""
    k, pod = rank % TP, rank // TP
    if ORDER == "tp-dp-pp":
        return pod % DP, pod // DP, k
    if ORDER == "tp-pp-dp":
        return pod // PP, pod % PP, k
    raise SystemExit(f"unknown rank order {ORDER!r}")


def groups(rank):
    replica, stage, k = coordinates(rank)
    everyone = range(WORLD)
    return {
        "tp": [r for r in everyone if r // TP == rank // TP],
        "pp": [r for r in everyone if coordinates(r)[0] == replica and coordinates(r)[2] == k],
        "dp": [r for r in everyone if coordinates(r)[1] == stage and coordinates(r)[2] == k],
    }


def connect():
    last = None
    while time.monotonic() < DEADLINE:
        try:
            address = socket.gethostbyname(MASTER)
            conn = socket.create_connection((address, PORT), timeout=5)
            # The 5 s were for connecting: the master answers only once every rank has registered, and a
            # pod started later than 5 s after this one made this rank give up while the rest went on.
            conn.settimeout(max(1.0, DEADLINE - time.monotonic()))
            return conn, address
        except OSError as exc:
            last = exc
            time.sleep(0.5)
    raise SystemExit(f"could not reach MASTER_ADDR {MASTER}:{PORT}: {last}")


def serve(listener, table, done):
    """Node rank 0: collect WORLD registrations, then answer each with the whole table."""
    clients = []
    while len(table) < WORLD:
        conn, _ = listener.accept()
        message = json.loads(conn.makefile().readline())
        if message["rank"] in table:
            raise SystemExit(f"rank {message['rank']} registered twice")
        table[message["rank"]] = message
        clients.append(conn)
    payload = (json.dumps({str(r): m for r, m in sorted(table.items())}) + "\n").encode()
    for conn in clients:
        conn.sendall(payload)
        conn.close()
    done.set()


def run_rank(local, results):
    rank = NODE_RANK * NPROC + local
    conn, master_ip = connect()
    implied_replica, implied_stage, _ = coordinates(rank)
    stage, replica = int(env.get("PJ_PP_RANK", implied_stage)), int(env.get("PJ_DP_RANK", implied_replica))
    me = {"rank": rank, "pod": POD, "stage": stage, "replica": replica,
          "gpus": GPUS, "ip": conn.getsockname()[0]}
    conn.sendall((json.dumps(me) + "\n").encode())
    table = {int(r): m for r, m in json.loads(conn.makefile().readline()).items()}
    conn.close()
    problems = []
    if sorted(table) != list(range(WORLD)):
        problems.append(f"table has ranks {sorted(table)}, not 0..{WORLD - 1}")
    replica, stage, _ = coordinates(rank)
    if (replica, stage) != (me["replica"], me["stage"]):
        problems.append(f"rank {rank} implies replica {replica} stage {stage}, pod says {me['replica']}/{me['stage']}")
    mine = groups(rank)
    if sorted(mine["tp"]) != sorted(r for r, m in table.items() if m["pod"] == POD):
        problems.append(f"TP group {mine['tp']} is not the ranks of pod {POD}")
    if any(table[r]["replica"] != replica for r in mine["pp"]) or len({table[r]["stage"] for r in mine["pp"]}) != PP:
        problems.append(f"PP group {mine['pp']} is not one replica's {PP} stages")
    if any(table[r]["stage"] != stage for r in mine["dp"]) or len({table[r]["replica"] for r in mine["dp"]}) != DP:
        problems.append(f"DP group {mine['dp']} is not one stage's {DP} replicas")
    results[local] = {"rank": rank, "groups": mine, "masterIp": master_ip, "problems": problems, "table": table}


def main():
    fail_rank = env.get("WORKER_FAIL_NODE_RANK")
    if fail_rank is not None and int(fail_rank) == NODE_RANK and env.get("WORKER_INCARNATION", "0") == env.get(
        "WORKER_FAIL_INCARNATION", "0"
    ):
        print(f"{POD}: failing on purpose (node rank {NODE_RANK})", flush=True)
        sys.exit(3)
    problems = []
    if len(set(GPUS)) != NPROC:
        problems.append(f"pod has GPUs {GPUS}, expected {NPROC} distinct ones")
    table, done = {}, threading.Event()
    if NODE_RANK == 0:
        listener = socket.create_server(("", PORT), backlog=WORLD)
        threading.Thread(target=serve, args=(listener, table, done), daemon=True).start()
    results = {}
    threads = [threading.Thread(target=run_rank, args=(local, results)) for local in range(NPROC)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(1.0, DEADLINE - time.monotonic()))
    if len(results) != NPROC:
        problems.append(f"only {len(results)} of {NPROC} local ranks finished the rendezvous")
    if NODE_RANK == 0 and not done.wait(max(1.0, DEADLINE - time.monotonic())):
        problems.append("the master never saw every rank")
    for result in results.values():
        problems += result["problems"]
    any_result = next(iter(results.values()), {"table": {}, "masterIp": ""})
    summary = {
        "pod": POD, "nodeRank": NODE_RANK, "worldSize": WORLD, "gpus": GPUS, "masterIp": any_result["masterIp"],
        "ranks": sorted(r["rank"] for r in results.values()),
        "groups": {str(r["rank"]): r["groups"] for r in results.values()},
        "peers": {str(rank): [m["pod"], m["ip"]] for rank, m in sorted(any_result["table"].items())},
        "problems": problems,
    }
    text = json.dumps(summary, separators=(",", ":"))
    print(text, flush=True)
    try:
        with open("/dev/termination-log", "w") as log:
            log.write(text[:4096])
    except OSError:
        pass
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

"""By hand only (docs/packaging.md, "Real torchrun"): the worker's group checks with real torch.distributed.

Run under torchrun in every pod of a ParallelJob, with nothing but the env the operator gave the pod:

    torchrun --nnodes=$((WORLD_SIZE / PJ_NPROC_PER_NODE)) --nproc-per-node=$PJ_NPROC_PER_NODE \
        --node-rank=$NODE_RANK --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT torch_groups.py

torchrun's static rendezvous (its TCP store on MASTER_ADDR:MASTER_PORT) numbers the ranks
``node_rank * nproc + local_rank``. Every rank then builds all TP, PP and DP groups with ``new_group`` from
the rank alone, by ``PJ_RANK_ORDER``, the way Megatron-LM does (its own arithmetic, not ParallelJob's),
all-gathers (pod, ``PJ_PP_RANK``, ``PJ_DP_RANK``, GPU ids) over gloo, and counts as mismatches: a TP group
that is not exactly its pod's ranks, a PP group not one replica's stages, a DP group not one stage's
replicas, a pod whose stage/replica differ from what its ranks imply, and an all-reduce in a group whose
sum is not the sum of the group's ranks. The count is all-reduced; rank 0 prints the rank -> pod table and
``group mismatches: N``. Exit 0 only when N is 0.
"""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

TP, PP, DP = int(os.environ["PJ_TP_SIZE"]), int(os.environ["PJ_PP_SIZE"]), int(os.environ["PJ_DP_SIZE"])
ORDER = os.environ.get("PJ_RANK_ORDER", "tp-dp-pp")


def coordinates(rank):
    """(replica, stage) of a global rank, by the rank order's nesting (TP innermost)."""
    pod = rank // TP
    if ORDER == "tp-dp-pp":
        return pod % DP, pod // DP
    if ORDER == "tp-pp-dp":
        return pod // PP, pod % PP
    raise SystemExit(f"unknown rank order {ORDER!r}")


def all_groups(world):
    """Every TP, PP and DP group as rank lists, in one order every rank agrees on."""
    tp = [list(range(start, start + TP)) for start in range(0, world, TP)]
    pp, dp = [], []
    for k in range(TP):
        for replica in range(DP):
            pp.append([r for r in range(world) if r % TP == k and coordinates(r)[0] == replica])
        for stage in range(PP):
            dp.append([r for r in range(world) if r % TP == k and coordinates(r)[1] == stage])
    return {"tp": tp, "pp": pp, "dp": dp}


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pod = os.environ.get("PJ_POD_NAME", socket.gethostname())
    me = {"rank": rank, "pod": pod, "stage": int(os.environ["PJ_PP_RANK"]), "replica": int(os.environ["PJ_DP_RANK"]),
          "gpus": os.environ.get("PARALLELJOB_FAKE_GPU_IDS", ""), "host": socket.gethostname()}
    table = [None] * world
    dist.all_gather_object(table, me)
    problems = []
    if world != TP * PP * DP:
        problems.append(f"world size {world} is not TP*PP*DP = {TP * PP * DP}")
    replica, stage = coordinates(rank)
    if (replica, stage) != (me["replica"], me["stage"]):
        problems.append(f"rank {rank} implies replica {replica} stage {stage}, its pod says {me['replica']}/{me['stage']}")
    mine = {}
    for kind, groups in all_groups(world).items():
        for ranks in groups:
            group = dist.new_group(ranks)  # every rank creates every group, in the same order
            if rank in ranks:
                mine[kind] = (ranks, group)
    tp_ranks, pp_ranks, dp_ranks = mine["tp"][0], mine["pp"][0], mine["dp"][0]
    if sorted(tp_ranks) != sorted(r for r in range(world) if table[r]["pod"] == pod):
        problems.append(f"TP group {tp_ranks} is not the ranks of pod {pod}")
    if any(table[r]["replica"] != replica for r in pp_ranks) or len({table[r]["stage"] for r in pp_ranks}) != PP:
        problems.append(f"PP group {pp_ranks} is not one replica's {PP} stages")
    if any(table[r]["stage"] != stage for r in dp_ranks) or len({table[r]["replica"] for r in dp_ranks}) != DP:
        problems.append(f"DP group {dp_ranks} is not one stage's {DP} replicas")
    for kind, (ranks, group) in mine.items():
        value = torch.tensor([float(rank)])
        dist.all_reduce(value, group=group)
        if int(value.item()) != sum(ranks):
            problems.append(f"all-reduce in the {kind} group {ranks} gave {value.item()}, not {sum(ranks)}")
    print(json.dumps({"rank": rank, "pod": pod, "tp": tp_ranks, "pp": pp_ranks, "dp": dp_ranks,
                      "problems": problems}), flush=True)
    count = torch.tensor([len(problems)])
    dist.all_reduce(count)
    if rank == 0:
        print(json.dumps({str(r): [m["pod"], m["gpus"]] for r, m in enumerate(table)}), flush=True)
        print(f"torch {torch.__version__}, backend {dist.get_backend()}, world {world}: "
              f"group mismatches: {int(count.item())}", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if int(count.item()) else 0)


if __name__ == "__main__":
    main()

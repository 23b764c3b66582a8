"""An elastic data-parallel trainer for a ParallelJob with minData/maxData, started by a bare `torchrun
elastic_train.py` in every worker pod (the operator sets PET_NNODES=MIN:MAX, the c10d rendezvous and
PET_MAX_RESTARTS). After every rendezvous it forms its groups from what each pod was told, not from rank
numbers (c10d numbers the nodes in the order they joined): a DP group is every rank with the same pipeline
stage (PJ_PP_RANK) and tensor index (LOCAL_RANK), one per live replica (REPLICA_GROUP_ID). It checks that each
DP group holds one stage and one member per replica, sums a one over it, and steps until STOP_FILE exists.
Checkpoint-free: the model state of this toy is nothing; a real trainer reloads its last checkpoint or,
TorchFT-style, copies the weights from a live replica here.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    stage, local = int(os.environ["PJ_PP_RANK"]), int(os.environ["LOCAL_RANK"])
    replica = int(os.environ["REPLICA_GROUP_ID"])
    everyone: list[tuple[int, int, int] | None] = [None] * world
    dist.all_gather_object(everyone, (stage, replica, local))
    members = [m for m in everyone if m is not None]
    groups: dict[tuple[int, int], list[int]] = {}
    for r, (s, _, tp_index) in enumerate(members):
        groups.setdefault((s, tp_index), []).append(r)
    handles = {key: dist.new_group(ranks) for key, ranks in sorted(groups.items())}  # same order on every rank
    replicas = sorted({g for _, g, _ in members})
    mine = groups[(stage, local)]
    one_stage = all(members[r][0] == stage for r in mine) and len(mine) == len(replicas)
    total = torch.ones(1)
    dist.all_reduce(total, group=handles[(stage, local)])
    verdict = "ok" if one_stage and int(total.item()) == len(replicas) else "MISMATCH"
    if rank == 0:
        dp = " ".join(f"s{s}t{t}:{[members[r][1] for r in ranks]}" for (s, t), ranks in sorted(groups.items()))
        print(
            f"round restart={os.environ.get('TORCHELASTIC_RESTART_COUNT')} world={world}"
            f" replicas={replicas} dp-groups(stage,tp:replica ids)={dp} {verdict}",
            flush=True,
        )
    if verdict != "ok":
        print(f"rank {rank} MISMATCH: my DP group {mine} holds {[members[r] for r in mine]}", flush=True)
        return 1
    stop = Path(os.environ.get("STOP_FILE", "/tmp/elastic-stop"))
    while not stop.exists():
        grad = torch.ones(1)
        dist.all_reduce(grad, group=handles[(stage, local)])
        time.sleep(0.2)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

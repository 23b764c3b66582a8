"""Check, from inside the training processes, that the framework sees the groups the placer chose.

Started by a bare `torchrun train.py` in every pod of a ParallelJob (torchrun reads its node rank, node
count, processes per node and rendezvous address from the PET_* variables the operator sets), it builds
the TP/PP/DP groups the way frameworks do, with `torch.distributed.device_mesh`, in the job's rank order
(PJ_RANK_ORDER), then:

- checks that its mesh coordinates (replica, stage) equal the ones the operator gave its pod
  (PJ_DP_RANK, PJ_PP_RANK): they differ exactly when the framework's order is not the job's rankOrder;
- gathers, over its DP group and its PP group, which pod each member runs in, and checks that the DP
  group holds one stage of every replica and the PP group every stage of one replica;
- runs a few steps of data-parallel training of a tiny model (gradients all-reduced over the DP group).

Each rank prints one line; the process exits non-zero on any disagreement. CPU works (gloo); on GPUs it
uses NCCL. Needs PyTorch >= 2.4.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

# Dimension names outermost first, as init_device_mesh takes them (row-major: the last varies fastest).
MESH_DIMS = {"tp-dp-pp": ("pp", "dp", "tp"), "tp-pp-dp": ("dp", "pp", "tp")}


def env_int(name: str) -> int:
    return int(os.environ[name])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="data-parallel training steps to run")
    args = parser.parse_args()

    tp, pp, dp = env_int("PJ_TP_SIZE"), env_int("PJ_PP_SIZE"), env_int("PJ_DP_SIZE")
    order = os.environ.get("PJ_RANK_ORDER", "tp-dp-pp")
    pod = os.environ.get("PJ_POD_NAME", os.environ.get("HOSTNAME", "?"))
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != tp * pp * dp:
        print(f"rank {rank}: world size {world} != TP{tp} x PP{pp} x DP{dp}", flush=True)
        return 2

    names = MESH_DIMS[order]
    sizes = {"tp": tp, "pp": pp, "dp": dp}
    mesh = init_device_mesh("cuda" if use_cuda else "cpu", tuple(sizes[n] for n in names), mesh_dim_names=names)
    coordinate = mesh.get_coordinate()
    assert coordinate is not None
    at = dict(zip(names, coordinate, strict=True))
    problems = []
    # A whole-tray pod (GB200 NVL72) runs a slice of a TP group larger than the tray: its TP ranks start at
    # PJ_TP_RANK_OFFSET (0 for a pod that holds the whole group).
    tp_rank = int(os.environ.get("PJ_TP_RANK_OFFSET", "0")) + int(os.environ["LOCAL_RANK"])
    given = {"dp": env_int("PJ_DP_RANK"), "pp": env_int("PJ_PP_RANK"), "tp": tp_rank}
    for dim in ("dp", "pp", "tp"):
        if at[dim] != given[dim]:
            problems.append(f"mesh says {dim} {at[dim]}, the operator gave this pod {dim} {given[dim]}")

    # What each member's pod was placed as (by the operator), not its mesh coordinates: those agree with
    # the mesh by construction, and the question is whether the mesh's groups are the placer's groups.
    me = (pod, given["dp"], given["pp"], given["tp"])
    dp_members: list[tuple[str, int, int, int] | None] = [None] * dp
    pp_members: list[tuple[str, int, int, int] | None] = [None] * pp
    dist.all_gather_object(dp_members, me, group=mesh.get_group("dp"))
    dist.all_gather_object(pp_members, me, group=mesh.get_group("pp"))
    dp_stages = sorted({m[2] for m in dp_members if m})
    if len(dp_stages) != 1 or sorted(m[1] for m in dp_members if m) != list(range(dp)):
        problems.append(f"DP group holds stages {dp_stages} (the placer's holds one stage of every replica)")
    pp_replicas = sorted({m[1] for m in pp_members if m})
    if len(pp_replicas) != 1 or [m[2] for m in pp_members if m] != list(range(pp)):
        problems.append(f"PP group holds replicas {pp_replicas} (the placer's holds every stage of one replica)")

    # A few real DP steps: every replica of a stage must end with the same weights.
    torch.manual_seed(1234 + at["pp"] * 100 + at["tp"])
    model = torch.nn.Linear(16, 16)
    if use_cuda:
        model = model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dp_group = mesh.get_group("dp")
    for step in range(args.steps):
        generator = torch.Generator().manual_seed(step * 1000 + at["dp"])  # each replica sees its own batch
        batch = torch.randn(8, 16, generator=generator)
        loss = model(batch.to(next(model.parameters()).device)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad, group=dp_group)
            param.grad /= dp
        optimizer.step()
    checksum = sum(float(p.detach().sum()) for p in model.parameters())
    sums: list[float | None] = [None] * dp
    dist.all_gather_object(sums, round(checksum, 6), group=dp_group)
    if len(set(sums)) != 1:
        problems.append(f"replicas diverged after DP steps: {sums}")

    members = ", ".join(f"{m[0]}/tp{m[3]}" for m in dp_members if m)
    ranks = dist.get_process_group_ranks(dp_group)
    verdict = "OK" if not problems else "MISMATCH: " + "; ".join(problems)
    print(
        f"rank {rank:3d} pod {pod} replica {at['dp']} stage {at['pp']} tp {at['tp']} | "
        f"DP group ranks {ranks} = {members} | {verdict}",
        flush=True,
    )
    dist.destroy_process_group()
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

"""``paralleljob bench chaos``: the long chaos run (default: 100 operator SIGKILLs) on a fresh dev cluster
of 24 fake 8-GPU nodes, torn down after; prints the report (operations, kills, checks, violations)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from paralleljob.chaosrun.run import ChaosConfig, run_chaos


def run_chaos_bench(seed: int = 1, kills: int = 100, nodes: int = 24) -> dict[str, Any]:
    from paralleljob.devcluster.cluster import down, up
    from paralleljob.devcluster.nodes import NodeShape

    name = f"bench-chaos-{os.getpid()}"
    shape = NodeShape(count=nodes, gpus_per_node=8, nodes_per_rack=4)
    cluster = up(name, shape, die_with_caller=True)
    log_dir = Path(tempfile.mkdtemp(prefix="pj-chaos-"))
    print(f"operator logs in {log_dir}", file=sys.stderr, flush=True)
    try:
        config = ChaosConfig(seed=seed, kills=kills)
        report = asyncio.run(run_chaos(cluster.kubeconfig, shape, config, log_dir))
    finally:
        down(name)
    return {"nodes": nodes, **report.as_dict()}

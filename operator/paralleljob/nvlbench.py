"""`paralleljob bench nvl72`: placing on NVL72 racks (GB200, 18 trays of 4 GPUs per NVLink clique) at 100k GPUs.

The cluster (default 1,389 racks = 100,008 GPUs) is filled to about half through the NVLink placer with
random jobs, single-tray ones among them so that many trays are partly used, a few GPUs are failed, then
TP8xPP8xDP32 (2,048 GPUs, each TP group on 2 whole trays of one clique) is placed and released ``repeat``
times. Times are CPU time of this process (``benchload.clock``), medians and 90th percentiles.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from paralleljob.benchload import clock, fill
from paralleljob.core import ClusterState, JobSpec, cost_model
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer

# TP, PP, DP of the background jobs: single-tray ones among them, so that many trays are partly used
NVL72_FILL_SHAPES = ((1, 2, 4, 4, 8, 16), (1, 1, 2, 4), (1, 2, 4, 8))


def run_nvl72(racks: int = 1389, repeat: int = 15, seed: int = 1, spares: int = 0) -> dict[str, Any]:
    start = time.perf_counter()
    state = ClusterState(nvl72_topology(racks))
    placer = NVLinkPlacer(state, spares=spares)
    build_s = time.perf_counter() - start
    jobs = fill(state, seed, placer=placer, shapes=NVL72_FILL_SHAPES)
    fill_s = time.perf_counter() - start - build_s
    job = JobSpec("big", 8, 8, 32, 40.0)
    model = cost_model("seed")
    samples, wall = [], []
    placement = None
    for _ in range(repeat):
        t0, w0 = clock(), time.perf_counter()
        placement = placer.place(job, model)
        samples.append((clock() - t0) * 1e3)
        wall.append((time.perf_counter() - w0) * 1e3)
    assert placement is not None
    cliques = {state.topology.domain_of[1][n] for n in placement.group_nodes}
    ordered = sorted(samples)
    return {
        "racks": racks,
        "gpus": state.topology.num_gpus,
        "spares_per_clique": spares,
        "fill_jobs_tried": jobs,
        "allocated_fraction": round(state.counts()["allocated"] / state.topology.num_gpus, 3),
        "build_s": round(build_s, 2),
        "fill_s": round(fill_s, 1),
        "job": job.describe(),
        "place_ms_median": round(statistics.median(samples), 2),
        "place_ms_p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "place_wall_ms_median": round(statistics.median(wall), 2),
        "cliques_used": len(cliques),
        "cost_ms": round(placement.cost.total_ms, 3),
        "lower_bound_ms": round(placement.lower_bound_ms, 3),
        "proven_optimal": placement.proven_optimal,
        "target_median_ms": 10.0,
    }

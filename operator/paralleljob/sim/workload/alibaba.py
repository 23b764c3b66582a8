"""Adapters for the Alibaba 2023 GPU trace ("openb", Weng et al., ATC'23) in whole-GPU mode; ``read_pod_shares``
also keeps each pod's ``gpu_milli`` for the sharing simulation (MIG/MPS, sim/run/sharing.py).

Pods: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
scheduled_time``. A pod that shares a GPU (gpu_milli < 1000) gets one whole GPU; pods without GPUs are
skipped; submit = creation_time; duration = deletion_time - scheduled_time, or - creation_time for a pod
that was never scheduled (it held no GPU in the trace, but it did want one for that long); rows with no
deletion_time have no end and are dropped. The QoS class becomes the tenant, the only class the trace has.

Nodes: ``sn,cpu_milli,memory_mib,gpu,model``: heterogeneous nodes of 1..8 GPUs. The trace does not say
how much memory its GPU models have; the table below uses the public figures and assumes 32 GB for the
anonymised G2/G3. Trace jobs ask for no particular memory, so it only matters to a user who adds one.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from paralleljob.core.topology import Level, NodeSpec, Topology
from paralleljob.sim.workload.trace import TraceError, TraceJob, check_row_width, open_csv, sort_and_limit

GPU_MEMORY_GB = {"P100": 16.0, "T4": 16.0, "V100M16": 16.0, "V100M32": 32.0, "A10": 24.0, "G2": 32.0, "G3": 32.0}
DEFAULT_GPU_MEMORY_GB = 32.0


def read_pods(path: Path, limit: int | None = None) -> list[TraceJob]:
    return sort_and_limit([job for job, _ in _pods(path)], limit)


def read_pod_shares(path: Path) -> list[tuple[TraceJob, int]]:
    """The same pods as :func:`read_pods` (in submit order), each with its ``gpu_milli``: thousandths of one
    GPU a pod of one GPU asked for (1000 for whole GPUs), for the sharing simulation (sim/run/sharing.py)."""
    return sorted(_pods(path), key=lambda pair: pair[0].submit_s)


def _pods(path: Path) -> list[tuple[TraceJob, int]]:
    jobs = []
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        needed = {"name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"}
        missing = needed - set(reader.fieldnames or ())
        if missing:
            raise TraceError(f"{path.name}: not an Alibaba 2023 pod list, missing column(s) {sorted(missing)}")
        width = len(reader.fieldnames or ())
        for row in reader:
            line = reader.line_num
            check_row_width(row, width, f"{path.name}:{line}")
            try:
                gpus = int(row["num_gpu"] or 0)
                milli = int(row["gpu_milli"] or 0)
                if gpus == 0 or not (row["deletion_time"] or "").strip():
                    continue
                created = float(row["creation_time"])
                started = float(row["scheduled_time"]) if (row["scheduled_time"] or "").strip() else created
                ended = float(row["deletion_time"])
            except ValueError as exc:
                raise TraceError(f"{path.name}:{line}: {exc}") from None
            if milli < 1000:
                gpus = max(1, gpus)  # a share of a GPU occupies a whole one here
            job = TraceJob(
                job_id=row["name"],
                submit_s=created,
                duration_s=max(0.0, ended - started),
                num_gpus=gpus,
                tenant=(row.get("qos") or "").strip() or "default",
            )
            jobs.append((job, min(max(milli, 1), 1000)))
    if not jobs:
        raise TraceError(f"{path.name}: no pod with a GPU and an end (deletion_time) to replay")
    return jobs


def read_nodes(
    path: Path, *, intra_node_bw_gbps: float = 600.0, inter_node_bw_gbps: float = 50.0
) -> Topology:
    """A flat topology (node, cluster) of the trace's heterogeneous GPU nodes, in file order."""
    specs = []
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        if not {"sn", "gpu"} <= set(reader.fieldnames or ()):
            raise TraceError(f"{path.name}: not an Alibaba node list (need columns sn, gpu, model)")
        for line, row in enumerate(reader, start=2):
            try:
                gpus = int(row["gpu"])
            except ValueError:
                raise TraceError(f"{path.name}:{line}: gpu must be an integer, got {row['gpu']!r}") from None
            model = (row.get("model") or "").strip()
            memory = GPU_MEMORY_GB.get(model, DEFAULT_GPU_MEMORY_GB)
            specs.append(NodeSpec(row["sn"], gpus, memory, ("cluster",), model))
    return Topology.from_nodes(specs, [Level("node", intra_node_bw_gbps), Level("cluster", inter_node_bw_gbps)])


def read_generic_nodes(
    path: Path, *, intra_node_bw_gbps: float = 600.0, inter_node_bw_gbps: float = 50.0, rack_bw_gbps: float = 50.0
) -> Topology:
    """A generic node list: ``name,gpus[,gpu_memory_gb][,model][,rack]``; a ``rack`` column adds a level."""
    specs = []
    with open_csv(path) as handle:
        reader = csv.DictReader(handle)
        columns = set(reader.fieldnames or ())
        if not {"name", "gpus"} <= columns:
            raise TraceError(f"{path.name}: a node list needs columns name,gpus (or the Alibaba sn,gpu,model)")
        racks = "rack" in columns
        for line, row in enumerate(reader, start=2):
            try:
                gpus = int(row["gpus"])
                memory = float(row.get("gpu_memory_gb") or 80.0)
            except ValueError as exc:
                raise TraceError(f"{path.name}:{line}: {exc}") from None
            if not math.isfinite(memory) or memory <= 0:
                raise TraceError(f"{path.name}:{line}: gpu_memory_gb must be positive")
            domains = ((row.get("rack") or "rack-0").strip(), "cluster") if racks else ("cluster",)
            specs.append(NodeSpec(row["name"], gpus, memory, domains, (row.get("model") or "").strip()))
    levels = [Level("node", intra_node_bw_gbps)]
    if racks:
        levels.append(Level("rack", rack_bw_gbps))
    levels.append(Level("cluster", inter_node_bw_gbps))
    return Topology.from_nodes(specs, levels)


def read_node_list(path: Path, **bandwidths: float) -> Topology:
    """Either node-list format, told apart by its header."""
    with open_csv(path) as handle:
        header = next(csv.reader(handle), [])
    if "sn" in header:
        return read_nodes(path, **{k: v for k, v in bandwidths.items() if k != "rack_bw_gbps"})
    return read_generic_nodes(path, **bandwidths)

"""``paralleljob bench dra``: the operator's apply -> bound and node-failure repair with GPUs as DRA devices,
next to the device-plugin mode, in the same run (issue 13).

Two dev clusters of the same shape are up side by side, one per mode (``--gpu-api device-plugin`` and
``--gpu-api dra``), each with its own operator process. Samples alternate between the modes, so whatever
else runs on the machine weighs on both alike. In DRA mode each worker costs two more writes before its
bind (its ResourceClaim, then the claim's status with the exact devices), which is what the comparison
shows. The measurements are those of ``bench-operator`` (``bench.py``): a 64-pod job (TP1 x PP8 x DP8, one
GPU per pod, so 64 claims) from create to all pods bound, and a TP4 x PP2 x DP2 job's node turned NotReady
to its replacement pods bound. Between samples a DRA run also waits until the operator has deleted the
claims of the pods it removed, so that no sample starts with devices still held.

With ``wave_gangs``, each round also fails the node 1 s into a wave of that many ParallelJobs of TP1 x DP
``wave_pods`` (one claim a pod in DRA mode) created at once: the repair has to get past every request the
wave queued in the operator's lanes and the API server.

With ``nvl72_racks``, both clusters also have that many GB200 NVL72 racks (18 trays of 4 GPUs each; in DRA
mode the trays publish DRA devices and the ComputeDomain driver's channel) and each operator holds
:data:`SPARES_PER_CLIQUE` warm spare trays per clique; each round also fails a tray under a TP8 x PP2 job
(``gpuProduct`` GB200: 4 whole-tray pods, its TP groups on 2 trays of one clique each), idle and, with a
wave, 1 s into one, to the replacement pod bound on a tray of the same clique (the SPEC's 2 s repair target
on the NVL72 path).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from paralleljob.devcluster import nvl72
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devtools.bench_kit import HGX_VICTIM, Victim, Wave, start_operator
from paralleljob.devtools.bench_operator import bench_latency, bench_repair
from paralleljob.devtools.operatorproc import OperatorProcess
from paralleljob.k8s.edge.render.computedomain import CLIQUE_LABEL
from paralleljob.k8s.runtime.api import ApiError, Kube

MODES = ("device-plugin", "dra")
NAMESPACES = ("bench-latency", "bench-repair", "bench-tray-repair")
WAVE_NAMESPACE = "bench-repair-wave"
SPARES_PER_CLIQUE = 2
TRAY_VICTIM = Victim("tray-victim", 8, 2, 1, pods=4, spec=(("gpuProduct", nvl72.PRODUCT),), on_trays=True)


async def _claims_gone(kube: Kube, namespace: str, timeout_s: float = 60.0) -> None:
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    deadline = time.monotonic() + timeout_s
    while True:
        items, _ = await kube.list(path)
        if not items:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(items)} ResourceClaims still in {namespace} after {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


def _summary(samples: list[float]) -> dict[str, Any]:
    return {
        "samples_s": [round(s, 4) for s in samples],
        "median_s": round(statistics.median(samples), 4),
        "max_s": round(max(samples), 4),
    }


def _check_alive(operators: dict[str, OperatorProcess]) -> None:
    """A sample needs its operator: one that exited (e.g. stepped down after a lease renewal stalled on a
    loaded machine) fails the run with its log instead of a sample that times out."""
    for mode, operator in operators.items():
        if not operator.running():
            raise RuntimeError(f"the {mode} operator exited ({operator.returncode}):\n{operator.log_tail(15)}")


class _Repairs:
    """One kind of repair's samples per mode, idle and in a wave (with the wave's own figures)."""

    def __init__(self, namespace: str, victim: Victim = HGX_VICTIM) -> None:
        self.namespace, self.victim = namespace, victim
        self.idle: dict[str, list[float]] = {mode: [] for mode in MODES}
        self.in_wave: dict[str, list[float]] = {mode: [] for mode in MODES}
        self.waves: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        self.cliques_left: dict[tuple[str, bool], int] = {}  # (mode, in a wave) -> samples; tray repairs only

    async def round(self, kube: Kube, mode: str, wave: Wave | None, sample: int) -> str:
        """One sample idle and, with ``wave``, one in it; returns the round's line of progress."""
        measured = await bench_repair(kube, self.namespace, 1, victim=self.victim)
        self.idle[mode] += measured["samples_s"]
        await self._count_clique_changes(kube, (mode, False), measured["moves"])
        if mode == "dra":
            await _claims_gone(kube, self.namespace)
        line = f"{self.idle[mode][-1]:.3f} s"
        if wave is not None:
            measured = await bench_repair(kube, self.namespace, 1, wave, first=sample, victim=self.victim)
            await self._count_clique_changes(kube, (mode, True), measured["moves"])
            self.in_wave[mode] += measured["samples_s"]
            self.waves[mode] += measured["wave"]["samples"]
            if mode == "dra":
                await _claims_gone(kube, self.namespace)
                await _claims_gone(kube, WAVE_NAMESPACE)
            line += f", in a wave {self.in_wave[mode][-1]:.3f} s ({self.waves[mode][-1]})"
        return line

    async def _count_clique_changes(self, kube: Kube, where: tuple[str, bool], moves: list[dict[str, Any]]) -> None:
        """A tray's replacement belongs in the failed tray's clique (its warm spares are there): count the
        samples where one went elsewhere, so that a fast repair to the wrong place does not pass unseen."""
        if not self.victim.on_trays:
            return
        items, _ = await kube.list("/api/v1/nodes")
        clique = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(CLIQUE_LABEL) for n in items}
        for move in moves:
            if any(clique.get(node) != clique.get(move["from"]) for node in move["to"]):
                self.cliques_left[where] = self.cliques_left.get(where, 0) + 1

    def summary(self, mode: str, key: str, wave: Wave | None) -> dict[str, Any]:
        out: dict[str, Any] = {key: _summary(self.idle[mode])}
        if self.victim.on_trays:
            out[key]["replacements_outside_the_clique"] = self.cliques_left.get((mode, False), 0)
        if wave is not None:
            out[f"{key}_in_wave"] = {
                **_summary(self.in_wave[mode]),
                "wave": {"gangs": wave.gangs, "pods_per_gang": wave.pods, "samples": self.waves[mode]},
            }
            if self.victim.on_trays:
                out[f"{key}_in_wave"]["replacements_outside_the_clique"] = self.cliques_left.get((mode, True), 0)
        return out


async def measure(
    clusters: dict[str, DevCluster],
    repeats: int,
    operators: dict[str, OperatorProcess],
    wave: Wave | None = None,
    trays: bool = False,
) -> dict[str, Any]:
    kubes = {mode: await Kube.connect(str(cluster.kubeconfig), concurrency=64) for mode, cluster in clusters.items()}
    latency: dict[str, list[float]] = {mode: [] for mode in clusters}
    nodes = _Repairs("bench-repair")
    tray_repairs = _Repairs("bench-tray-repair", TRAY_VICTIM) if trays else None
    wave_sample = itertools.count()
    try:
        for kube in kubes.values():
            for ns in NAMESPACES:
                with contextlib.suppress(ApiError):
                    await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        await asyncio.sleep(3.0)  # operator start-up and leader election
        for round_ in range(repeats):
            for mode, kube in kubes.items():
                _check_alive(operators)
                latency[mode] += (await bench_latency(kube, "bench-latency", 1))["samples_s"]
                if mode == "dra":
                    await _claims_gone(kube, "bench-latency")
                line = f"round {round_ + 1}/{repeats} {mode}: apply->bound {latency[mode][-1]:.3f} s"
                line += f", node repair {await nodes.round(kube, mode, wave, next(wave_sample))}"
                if tray_repairs is not None:
                    _check_alive(operators)
                    line += f", tray repair {await tray_repairs.round(kube, mode, wave, next(wave_sample))}"
                print(line, file=sys.stderr, flush=True)
    finally:
        for kube in kubes.values():
            await kube.close()
    out: dict[str, Any] = {}
    for mode in clusters:
        out[mode] = {"apply_to_bound_64": _summary(latency[mode])}
        out[mode].update(nodes.summary(mode, "node_not_ready_to_rebound", wave))
        if tray_repairs is not None:
            out[mode].update(tray_repairs.summary(mode, "tray_not_ready_to_rebound", wave))
    return out


def run_dra_benchmark(
    nodes: int = 8, repeats: int = 5, wave_gangs: int = 0, wave_pods: int = 40, nvl72_racks: int = 0
) -> dict[str, Any]:
    """Both modes on fresh dev clusters of ``nodes`` 8-GPU nodes (torn down after); returns the results.
    ``wave_gangs``: also a repair per round in a wave of that many TP1 x DP ``wave_pods`` gangs;
    ``nvl72_racks``: that many NVL72 racks beside the nodes, and a tray repair per round as well."""
    from paralleljob.devcluster.cluster import down, up
    from paralleljob.devcluster.nodes import NodeShape

    if nodes * 8 < 64:
        raise ValueError("the 64-pod job needs at least 8 nodes of 8 GPUs")
    if wave_gangs * wave_pods > nodes * 8 - 16 - 8:
        raise ValueError(f"a wave of {wave_gangs} x {wave_pods} GPUs leaves no room for the repair on {nodes} nodes")
    wave = Wave(WAVE_NAMESPACE, wave_gangs, wave_pods) if wave_gangs else None
    load_before = os.getloadavg()
    clusters: dict[str, DevCluster] = {}
    operators: dict[str, OperatorProcess] = {}
    workdir = Path(tempfile.mkdtemp(prefix="pj-bench-dra-"))
    try:
        for mode in MODES:
            name = f"bench-{mode}-{os.getpid()}"
            shape = NodeShape(count=nodes, gpus_per_node=8, nodes_per_rack=4, gpu_api=mode)
            clusters[mode] = up(name, shape, die_with_caller=True, nvl72_racks=nvl72_racks)
            logs = workdir / mode
            logs.mkdir()
            # The operator's own default lease (15 s), not bench-operator's 5 s: on the shared 2-core box a
            # renewal can stall for seconds, and an operator that steps down is not restarted here.
            spares = SPARES_PER_CLIQUE if nvl72_racks else 0
            operators[mode] = start_operator(clusters[mode], logs, lease_duration=15.0, spares_per_clique=spares)
        results = asyncio.run(measure(clusters, repeats, operators, wave, trays=nvl72_racks > 0))
    finally:
        for operator in operators.values():
            operator.stop()
        for mode in clusters:
            down(f"bench-{mode}-{os.getpid()}")
    load = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
    return {"nodes": nodes, "gpus": nodes * 8, "nvl72_racks": nvl72_racks, "repeats": repeats,
            "load_average_1_5_15": load, **results}  # fmt: skip

"""``paralleljob demo-cluster`` (``make demo``): the operator on the local control plane, end to end.

Brings up a dev cluster of fake 8-GPU nodes, starts the operator, applies the examples in
``deploy/examples/`` (several shapes, one that must queue, one the API refuses), shows a live table of
jobs, pods and nodes, fails a node and shows the repair, then frees room so the queued job runs. The
cluster and the operator are left running for exploration; ``paralleljob demo-cluster --down`` stops both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from paralleljob.devcluster.nodes import NodeShape
from paralleljob.devcluster.versions import cache_root, repo_root
from paralleljob.k8s.runtime.api import ApiError, Kube, job_path, retrying

CLUSTER = "demo"
NAMESPACE = "demo"
QUEUED_JOB_WAIT_S = 60.0  # the queued job is placed within a pass or two of the capacity freeing
STATE = "demo-operator.json"
DASHBOARD_PORT = 8090
console = Console()
if not console.is_terminal:
    console = Console(width=170)  # a log or CI capture: do not squeeze the tables into 80 columns


def _state_file() -> Path:
    return cache_root() / "run" / STATE


def stop_demo() -> int:
    from paralleljob.devcluster.cluster import down

    state = _state_file()
    if state.is_file():
        saved = json.loads(state.read_text())
        for what, key in (("operator", "pid"), ("web view", "dashboard_pid")):
            pid = int(saved.get(key, 0))
            if pid > 0:
                try:
                    os.kill(pid, signal.SIGTERM)
                    console.print(f"stopped the {what} (pid {pid})")
                except ProcessLookupError:
                    pass
        state.unlink()
    if not down(CLUSTER, report=lambda m: console.print(m)):
        console.print(f"no dev cluster {CLUSTER!r} was running")
    return 0


def start_operator(kubeconfig: Path) -> int:
    log = cache_root() / "run" / "demo-operator.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "paralleljob.cli",
            "operator",
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-port",
            "8080",
            "--metrics-host",
            "127.0.0.1",
            "--lease-duration",
            "5",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _state_file().write_text(json.dumps({"pid": proc.pid, "log": str(log)}))
    return proc.pid


def start_dashboard(kubeconfig: Path) -> int:
    """The web view beside the operator, so the story (queueing, a repair) can be watched on the map."""
    log = cache_root() / "run" / "demo-dashboard.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "paralleljob.cli", "dashboard", "--kubeconfig", str(kubeconfig),
         "--port", str(DASHBOARD_PORT)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    state = _state_file()
    saved = json.loads(state.read_text()) if state.is_file() else {}
    state.write_text(json.dumps({**saved, "dashboard_pid": proc.pid, "dashboard_log": str(log)}))
    return proc.pid


def examples() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((repo_root() / "deploy" / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                out[path.stem] = doc
    return out


class Demo:
    def __init__(self, kube: Kube, kubeconfig: Path) -> None:
        self.kube = kube
        self.kubeconfig = kubeconfig
        self.log: list[str] = []

    def say(self, message: str) -> None:
        self.log.append(message)
        self.log[:] = self.log[-8:]

    async def apply(self, doc: dict[str, Any]) -> None:
        name = doc["metadata"]["name"]
        if doc["kind"] == "ParallelJobQueue":
            path = "/apis/paralleljob.dev/v1alpha1/paralleljobqueues"
        else:
            path = job_path(NAMESPACE)
        try:
            await self.kube.request("POST", path, doc)
            self.say(f"applied {doc['kind']} {name}")
        except ApiError as exc:
            if exc.status == 409:
                self.say(f"{name} already exists")
            else:
                self.say(f"[red]the API server refused {name}:[/red] {escape(exc.message)}")

    async def _list(self, path: str) -> list[dict[str, Any]]:
        # A CRD just installed answers 429 "storage is (re)initializing" for a moment, longer on a busy
        # machine: the demo waits it out like the operator does, instead of dying with a traceback.
        items, _ = await retrying(lambda: self.kube.list(path), attempts=12, first_delay=0.2)
        return items

    async def snapshot(self) -> Group:
        jobs = await self._list(job_path(NAMESPACE))
        pods = await self._list(f"/api/v1/namespaces/{NAMESPACE}/pods")
        nodes = await self._list("/api/v1/nodes")
        table = Table(title="ParallelJobs", expand=True)
        for column in ("job", "phase", "TPxPPxDP", "GPUs", "nodes", "cost ms", "restarts", "why"):
            table.add_column(column)
        for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
            s = job.get("status") or {}
            phase = s.get("phase", "Pending")
            color = {"Running": "green", "Queued": "yellow", "Recovering": "magenta", "Failed": "red"}.get(phase, "")
            cost = (s.get("communicationCost") or {}).get("totalMs")
            failure = s.get("lastFailure") or {}
            why = s.get("message", "") if phase != "Running" else ""
            if phase == "Running" and failure:
                why = f"repaired after {failure.get('kind')} on {','.join(failure.get('nodes', []))}"
            table.add_row(
                job["metadata"]["name"],
                f"[{color}]{phase}[/{color}]" if color else phase,
                s.get("shape", ""),
                str(s.get("gpus", "")),
                s.get("nodes", ""),
                f"{cost:.1f}" if isinstance(cost, int | float) else "",
                str(s.get("restarts", 0)),
                (why or "")[:90],
            )
        by_node: dict[str, list[str]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not pod["metadata"].get("deletionTimestamp"):
                gpus = (pod["metadata"].get("annotations") or {}).get("paralleljob.dev/gpu-indices", "")
                by_node.setdefault(node, []).append(f"{pod['metadata']['name']}[{gpus}]")
        grid = Table(title="Nodes", expand=True)
        for column in ("node", "rack", "ready", "GPUs used", "pods [GPU indices]"):
            grid.add_column(column)
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            name = node["metadata"]["name"]
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            used = sum(len(p.split("[")[1].rstrip("]").split(",")) for p in by_node.get(name, []))
            rack = (node["metadata"].get("labels") or {}).get("network.topology.nvidia.com/leaf", "")
            bar = "█" * used + "·" * (8 - used)
            grid.add_row(
                name,
                rack,
                "[green]Ready[/green]" if ready else "[red]NotReady[/red]",
                bar,
                " ".join(sorted(by_node.get(name, []))),
            )
        return Group(table, grid, *(f"• {line}" for line in self.log))

    async def show(self, live: Live, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            live.update(await self.snapshot())
            await asyncio.sleep(0.5)

    async def show_until(self, live: Live, name: str, phase: str, timeout: float) -> float:
        """Keep the table live until job ``name`` reaches ``phase`` (or ``timeout``); seconds waited."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            live.update(await self.snapshot())
            if ((await self.job(name)).get("status") or {}).get("phase") == phase:
                break
            await asyncio.sleep(0.5)
        return time.monotonic() - start

    async def job(self, name: str) -> dict[str, Any]:
        return await retrying(lambda: self.kube.request("GET", job_path(NAMESPACE, name)), attempts=12, first_delay=0.2)


async def reset(kube: Kube, shape: NodeShape) -> None:
    """A demo run again on the cluster it left running starts from scratch: jobs gone, every node back."""
    from paralleljob.devcluster.chaos import restore_nodes

    jobs, _ = await kube.list(job_path(NAMESPACE))
    for job in jobs:
        await kube.request("DELETE", job_path(NAMESPACE, job["metadata"]["name"]))
    await restore_nodes(kube.api, shape)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pods, _ = await kube.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
        if not pods:
            break
        await asyncio.sleep(0.5)


async def scenario(kubeconfig: Path, shape: NodeShape, reused: bool) -> None:
    from paralleljob.devcluster.chaos import make_node_not_ready

    kube = await Kube.connect(str(kubeconfig))
    demo = Demo(kube, kubeconfig)
    try:
        if reused:
            await reset(kube, shape)
        try:
            await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        except ApiError as exc:
            if exc.status != 409:
                raise
        docs = examples()
        with Live(await demo.snapshot(), console=console, refresh_per_second=4) as live:
            for name in ("queue", "llama-70b", "llama-7b", "gpt-pipeline"):
                await demo.apply(docs[name])
                await demo.show(live, 1.5)
            demo.say("[bold]big-pretrain needs 4 whole nodes; only one is free: it must queue[/bold]")
            await demo.apply(docs["must-queue"])
            await demo.show(live, 2.5)
            await demo.apply(docs["invalid"])
            await demo.show(live, 2.5)
            victim = ((await demo.job("llama-70b")).get("status") or {}).get("nodes", "").split(",")[0]
            if victim:
                demo.say(f"[bold red]failing node {victim}[/bold red] (kwok turns it NotReady)")
                await make_node_not_ready(kube.api, victim)
                await demo.show(live, 4)
                failure = ((await demo.job("llama-70b")).get("status") or {}).get("lastFailure") or {}
                demo.say(
                    f"llama-70b: {escape(failure.get('message', ''))} -> {failure.get('action', '')}"
                    f" (cost {failure.get('costBeforeMs')} -> {failure.get('costAfterMs')} ms)"
                )
            demo.say("[bold]gpt-pipeline finishes (deleted): its 4 nodes free up for the queued job[/bold]")
            await kube.request("DELETE", job_path(NAMESPACE, "gpt-pipeline"))
            waited = await demo.show_until(live, "big-pretrain", "Running", QUEUED_JOB_WAIT_S)
            status = (await demo.job("big-pretrain")).get("status") or {}
            if status.get("phase") == "Running":
                cost = (status.get("communicationCost") or {}).get("totalMs")
                demo.say(
                    f"[bold green]big-pretrain left the queue after {waited:.1f} s[/bold green]: on "
                    f"{status.get('nodes', '')}, {cost} ms per step"
                )
            else:
                demo.say(
                    f"[red]big-pretrain is still {status.get('phase')} after {waited:.0f} s:[/red] "
                    f"{escape(str(status.get('message', '')))}"
                )
            await demo.show(live, 2)
    finally:
        await kube.close()


def main(args: argparse.Namespace) -> int:
    from paralleljob.devcluster.cluster import AlreadyRunning, get, up

    if args.down:
        return stop_demo()
    cluster = get(CLUSTER)
    reused = cluster is not None
    if cluster is None:
        try:
            cluster = up(CLUSTER, NodeShape(count=args.nodes, gpus_per_node=8, nodes_per_rack=4))
        except AlreadyRunning:
            cluster = get(CLUSTER)
    assert cluster is not None
    if _state_file().is_file():
        stop_demo_operator_only()
    pid = start_operator(cluster.kubeconfig)
    console.print(f"operator started (pid {pid}), metrics on http://127.0.0.1:8080/metrics")
    web = start_dashboard(cluster.kubeconfig)
    console.print(
        f"[bold]web view (pid {web}): open http://127.0.0.1:{DASHBOARD_PORT}/ to watch the demo on the map[/bold]"
    )
    time.sleep(3)
    asyncio.run(scenario(cluster.kubeconfig, cluster.shape, reused))
    console.print(
        f"\n[bold]The dev cluster {CLUSTER!r} and the operator keep running.[/bold]\n"
        f"  kubectl --kubeconfig {cluster.kubeconfig} get paralleljobs -n {NAMESPACE}\n"
        f"  kubectl --kubeconfig {cluster.kubeconfig} describe paralleljob llama-70b -n {NAMESPACE}\n"
        f"  web view: http://127.0.0.1:{DASHBOARD_PORT}/  (log: {cache_root() / 'run' / 'demo-dashboard.log'})\n"
        f"  operator log: {cache_root() / 'run' / 'demo-operator.log'}\n"
        f"[bold]Stop them all with:[/bold] paralleljob demo-cluster --down   (or: make demo-down)"
    )
    return 0


def stop_demo_operator_only() -> None:
    """Stop a previous run's operator and wait until it is gone (its metrics port must be free)."""
    state = _state_file()
    saved = json.loads(state.read_text())
    state.unlink()
    for key in ("pid", "dashboard_pid"):  # the operator, then the web view (its port must be free too)
        _stop_and_wait(int(saved.get(key, 0)))


def _stop_and_wait(pid: int) -> None:
    if pid <= 0:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)

"""``paralleljob dev-cluster up|down|status|kubeconfig|build``: the local control plane from the shell.

``up`` returns once the GPU nodes are Ready and leaves etcd, kube-apiserver, kwok and kube-controller-manager
(and, with ``--controllers jobset,kueue``, JobSet's and Kueue's controller managers, Kueue with a
kube-scheduler beside it) running in their own session;
``kubeconfig`` prints the path to hand to kubectl; ``down`` stops exactly what ``up`` started; ``build``
builds every binary, the optional controllers' included.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from paralleljob.devcluster import kubeline, process, state
from paralleljob.devcluster.versions import ADDONS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev-cluster",
        help="local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kwok), fake GPU nodes",
        description="Run a real Kubernetes API server on 127.0.0.1 with kwok-simulated GPU nodes.",
    )
    commands = parser.add_subparsers(dest="dev_cluster_command", metavar="SUBCOMMAND")
    commands.required = True

    def add(name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=help_text)
        if name != "build":
            sub.add_argument("--name", default="default", help="which dev cluster (default: %(default)s)")
        if name in ("build", "up"):
            sub.add_argument(
                "--kubernetes",
                choices=sorted(kubeline.LINES),
                default=None,
                help=f"Kubernetes minor (default: ${kubeline.ENV}, else {kubeline.DEFAULT}; docs/devcluster.md)",
            )
        sub.set_defaults(handler=_with_line(handler))
        return sub

    up_parser = add("up", "start the cluster and wait until its GPU nodes are Ready", _up)
    up_parser.add_argument("--nodes", type=int, default=4, help="fake GPU nodes (default: %(default)s)")
    up_parser.add_argument("--gpus-per-node", type=int, default=8, help="default: %(default)s")
    up_parser.add_argument("--nodes-per-rack", type=int, default=4, help="nodes per leaf switch (default: %(default)s)")
    up_parser.add_argument(
        "--gpu-api",
        choices=("device-plugin", "dra"),
        default="device-plugin",
        help="how nodes publish GPUs: allocatable nvidia.com/gpu + GFD labels, or DRA ResourceSlices of"
        " gpu.nvidia.com (default: %(default)s)",
    )
    up_parser.add_argument(
        "--mig-nodes",
        type=int,
        default=0,
        help="the first N nodes are set up for MIG: with --gpu-api dra every MIG device their GPUs could hold is"
        " published in NVIDIA's partitionable shape; with the device plugin each GPU is seven nvidia.com/mig-1g.10gb"
        " (the GPU Operator's mixed strategy, mig.config all-1g.10gb) (default: %(default)s)",
    )
    up_parser.add_argument(
        "--gang-api",
        action="store_true",
        help="serve Kubernetes' own Workload/PodGroup API (scheduling.k8s.io/v1alpha2) with its feature gates on",
    )
    up_parser.add_argument(
        "--kube-scheduler",
        action="store_true",
        help="also run kube-scheduler (same version) with the gang and topology-aware workload gates on;"
        " implies --gang-api",
    )
    up_parser.add_argument(
        "--controllers",
        default="",
        metavar="NAMES",
        help=f"optional controllers to run too, comma-separated ({', '.join(sorted(ADDONS))}); default: none",
    )
    up_parser.add_argument(
        "--kueue-qps",
        type=int,
        default=0,
        metavar="QPS",
        help="with --controllers kueue: its API client's limit (burst twice that); default: Kueue's shipped 50/100",
    )
    up_parser.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        help="kubelet nodes with containerd and fake GPUs beside the kwok nodes (needs root; see"
        " `dev-cluster prereqs`; default: %(default)s)",
    )
    up_parser.add_argument(
        "--nvl72-racks",
        type=int,
        default=0,
        help="GB200 NVL72 racks to add (18 kwok trays of 4 GPUs each, labelled nvidia.com/gpu.clique), with the"
        " ComputeDomain CRD and a stand-in for its controller (default: %(default)s)",
    )
    up_parser.add_argument(
        "--real-node-gpus", type=int, default=8, help="fake GPUs per real node (default: %(default)s)"
    )
    add("prereqs", "install what real nodes and `make image` need (root, apt-get); idempotent", _prereqs)
    load = add("load-image", "import a docker-archive (e.g. from `make image`) into every real node", _load_image)
    load.add_argument("archive", help="path of the docker-archive tarball")
    add("down", "stop every process the cluster started and delete its files", _down)
    add("status", "show the cluster's processes and nodes", _status)
    add("kubeconfig", "print the path of the cluster's kubeconfig", _kubeconfig)
    add(
        "build",
        "build (or locate) the etcd, kube-apiserver, kube-controller-manager and kwok binaries,"
        " and those of the optional controllers (JobSet, Kueue)",
        _build,
    )


def _with_line(handler: Any) -> Any:
    """Run ``handler`` with the chosen Kubernetes minor in the environment, so children inherit it."""

    def run(args: argparse.Namespace) -> int:
        if getattr(args, "kubernetes", None):
            kubeline.select(args.kubernetes)
        result: int = handler(args)
        return result

    return run


def _up(args: argparse.Namespace) -> int:
    from paralleljob.devcluster.cluster import AlreadyRunning, up
    from paralleljob.devcluster.nodes import NodeShape

    if args.nodes < 1 or args.gpus_per_node < 1 or args.nodes_per_rack < 1:
        print("--nodes, --gpus-per-node and --nodes-per-rack must be at least 1", file=sys.stderr)
        return 2
    if not 0 <= args.mig_nodes <= args.nodes:
        print("--mig-nodes must be between 0 and --nodes", file=sys.stderr)
        return 2
    shape = NodeShape(
        count=args.nodes,
        gpus_per_node=args.gpus_per_node,
        nodes_per_rack=args.nodes_per_rack,
        gpu_api=args.gpu_api,
        mig_nodes=args.mig_nodes,
    )
    controllers = tuple(name.strip() for name in args.controllers.split(",") if name.strip())
    unknown = sorted(set(controllers) - set(ADDONS))
    if unknown:
        print(f"unknown --controllers {', '.join(unknown)} (known: {', '.join(sorted(ADDONS))})", file=sys.stderr)
        return 2
    try:
        cluster = up(
            args.name,
            shape,
            controllers=controllers,
            gang_api=args.gang_api,
            kube_scheduler=args.kube_scheduler,
            real_nodes=args.real_nodes,
            real_node_gpus=args.real_node_gpus,
            nvl72_racks=args.nvl72_racks,
            kueue_qps=args.kueue_qps,
        )
    except AlreadyRunning as exc:
        print(f"{exc}; run `paralleljob dev-cluster down --name {args.name}` first", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError) as exc:
        print(f"dev-cluster up failed: {exc}", file=sys.stderr)
        return 1
    print(cluster.kubeconfig)
    return 0


def _prereqs(args: argparse.Namespace) -> int:
    from paralleljob.devcluster import hostcheck

    problems = hostcheck.install(lambda line: print(line, flush=True))
    for problem in problems:
        print(f"missing: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _load_image(args: argparse.Namespace) -> int:
    from pathlib import Path

    from paralleljob.devcluster.realnodes import load_image

    record = state.load(args.name)
    if record is None or not record.real_nodes:
        print(f"dev cluster {args.name!r} has no real nodes (`up --real-nodes N`)", file=sys.stderr)
        return 1
    try:
        loaded = load_image(args.name, Path(record.run_dir), Path(args.archive))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"loaded {args.archive} on {', '.join(loaded)}")
    return 0


def _down(args: argparse.Namespace) -> int:
    from paralleljob.devcluster.cluster import down

    if not down(args.name):
        print(f"no dev cluster named {args.name!r}", file=sys.stderr)
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    record = state.load(args.name)
    if record is None or not record.kubeconfig:
        print(f"no dev cluster named {args.name!r}; start one with `paralleljob dev-cluster up`", file=sys.stderr)
        return 1
    print(record.kubeconfig)
    return 0


def _status(args: argparse.Namespace) -> int:
    record = state.load(args.name)
    if record is None:
        print(f"dev cluster {args.name!r}: not running")
        return 1
    alive = [process.is_alive(p) for p in record.processes]
    print(f"dev cluster {args.name!r}: {'running' if alive and all(alive) else 'DEGRADED'}")
    print(f"  server      {record.server}")
    print(f"  kubeconfig  {record.kubeconfig}")
    print(f"  versions    {', '.join(f'{k} {v}' for k, v in sorted(record.versions.items()))}")
    for proc, is_up in zip(record.processes, alive, strict=True):
        print(f"  {proc.name:<23} pid {proc.pid:<8} {'up' if is_up else 'EXITED'}  log {proc.log}")
    if record.kubeconfig and all(alive):
        print(asyncio.run(_node_summary(record.kubeconfig)))
    return 0 if alive and all(alive) else 1


async def _node_summary(kubeconfig: str) -> str:
    from kubernetes_asyncio.client import CoreV1Api

    from paralleljob.devcluster.dra import count_slice_gpus
    from paralleljob.devcluster.kubeconfig import api_client
    from paralleljob.devcluster.nodes import GPU_RESOURCE, is_ready

    async with api_client(kubeconfig) as api:
        listed = await CoreV1Api(api).list_node()
        devices = await count_slice_gpus(api)
    ready = sum(1 for node in listed.items if is_ready(node))
    gpus = sum(int((node.status.allocatable or {}).get(GPU_RESOURCE, 0)) for node in listed.items)
    dra_note = f", {devices} GPUs as DRA devices" if devices else ""
    return f"  nodes       {len(listed.items)} ({ready} Ready), {gpus} GPUs allocatable{dra_note}"


def _build(args: argparse.Namespace) -> int:
    from paralleljob.devcluster import hostcheck
    from paralleljob.devcluster.build import (
        ensure_addon,
        ensure_binaries,
        ensure_dra_node_binaries,
        ensure_node_binaries,
    )

    try:
        paths = ensure_binaries()
        addons = {ADDONS[addon].name: ensure_addon(addon) / ADDONS[addon].name for addon in sorted(ADDONS)}
        # The real nodes' kubelet, device plugin, pause and CoreDNS: only where real nodes can run.
        if not kubeline.selected().kubelet:
            print(f"real-node binaries not built: Kubernetes {kubeline.selected().minor} has no kubelet here",
                  file=sys.stderr)  # fmt: skip
        elif hostcheck.missing_features():
            print(f"real-node binaries not built: {'; '.join(hostcheck.missing_features())}", file=sys.stderr)
        else:
            addons.update(ensure_node_binaries())
            addons.update(ensure_dra_node_binaries())  # containerd 2.x and fakedra: `up --gpu-api dra --real-nodes`
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    for name, path in {**paths, **addons}.items():
        print(f"{name}: {path}")
    return 0

"""``paralleljob status | describe | drain | undrain`` (and ``kubectl paralleljob ...``): the I/O around the
pure models in this package, through the operator's API client (``paralleljob.k8s.runtime.api.Kube``).

This module also registers ``paralleljob agent`` (:mod:`paralleljob.agent.cli`), so the whole node-side
command line is wired into ``paralleljob.cli`` by one entry. Exit codes: 0 done, 1 the cluster said no (not
found, forbidden, unreachable), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from paralleljob.core.errors import InvalidRequest

EXIT_API, EXIT_USAGE = 1, 2


def register(subparsers: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: $KUBECONFIG or in-cluster")

    status = subparsers.add_parser(
        "status", help="GPU map of the cluster by domain and node: free, used (by which job), unhealthy"
    )
    common(status)
    status.add_argument("-o", "--output", choices=("table", "json"), default="table")
    status.add_argument("--topology-config", type=Path, help="YAML: topology label keys (as for the operator)")
    status.set_defaults(handler=_run(_status))

    describe = subparsers.add_parser("describe", help="a ParallelJob: placement by rank, cost, conditions, events")
    common(describe)
    describe.add_argument("job", metavar="JOB", help="name, or namespace/name")
    describe.add_argument("-n", "--namespace", default=os.environ.get("PARALLELJOB_NAMESPACE", "default"))
    describe.add_argument("-o", "--output", choices=("table", "json"), default="table")
    describe.set_defaults(handler=_run(_describe))

    for name, undrain in (("drain", False), ("undrain", True)):
        verb = "give back" if undrain else "take out of service"
        p = subparsers.add_parser(
            name,
            help=f"{verb} a node (cordon + all GPUs) or single GPUs (--gpu NODE:IDX)",
            description=(
                "Uncordon NODE and clear the GPUs drained on it (GPUs the health agent reports stay out)."
                if undrain
                else "Cordon NODE and mark all its GPUs drained for maintenance: the jobs there are asked to"
                " checkpoint and moved after it (or the operator's grace period), with no restart counted;"
                " --now moves them at once."
            ),
        )
        common(p)
        p.add_argument("node", nargs="?", metavar="NODE")
        p.add_argument("--gpu", action="append", default=[], metavar="NODE:IDX", help="one GPU (repeatable)")
        p.add_argument("--dry-run", action="store_true", help="print the node patch, change nothing")
        if not undrain:
            p.add_argument(
                "--now",
                action="store_true",
                help="emergency: move the jobs at once, without their checkpoint (still no restart counted)",
            )
        p.set_defaults(handler=_run(_drain), undrain=undrain)

    from paralleljob.agent import cli as agent_cli

    agent_cli.register(subparsers)


def _run(command: Callable[[Any, argparse.Namespace], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        from kubernetes_asyncio.config import ConfigException

        from paralleljob.k8s.runtime.api import ApiError

        async def main() -> int:
            from paralleljob.k8s.runtime.api import Kube

            kube = await Kube.connect(args.kubeconfig, concurrency=8)
            try:
                return await command(kube, args)
            finally:
                await kube.close()

        try:
            return asyncio.run(main())
        except InvalidRequest as exc:
            print(f"paralleljob {args.command}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except ApiError as exc:
            print(f"paralleljob {args.command}: {exc}", file=sys.stderr)
            return EXIT_API
        except ConfigException as exc:  # no kubeconfig: the message says which flag or variable names one
            print(f"paralleljob {args.command}: {exc}", file=sys.stderr)
            return EXIT_API
        except OSError as exc:  # nothing listening: one line, no traceback
            print(f"paralleljob {args.command}: cannot reach the cluster: {exc}", file=sys.stderr)
            return EXIT_API

    return handler


async def _status(kube: Any, args: argparse.Namespace) -> int:
    from paralleljob.clitools.dralists import DRA_CLAIMS, DRA_SLICES, dra_list
    from paralleljob.clitools.gpumap import DraObjects, build_map
    from paralleljob.k8s.edge.config import TopologyConfig, load_topology_file
    from paralleljob.k8s.edge.constants import GROUP, PLURAL, VERSION
    from paralleljob.k8s.runtime.api import retrying

    config = load_topology_file(args.topology_config) if args.topology_config else TopologyConfig()
    nodes, pods, jobs = await asyncio.gather(
        retrying(lambda: kube.list("/api/v1/nodes")),
        retrying(lambda: kube.list("/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"})),
        retrying(lambda: kube.list(f"/apis/{GROUP}/{VERSION}/{PLURAL}")),
    )
    slices, claims = await asyncio.gather(
        dra_list(kube, DRA_SLICES),
        dra_list(kube, DRA_CLAIMS),
    )
    gpu_map = build_map(nodes[0], pods[0], jobs[0], config, DraObjects(slices, claims))
    if args.output == "json":
        print(json.dumps(gpu_map.to_json(), indent=2))
    else:
        from paralleljob.clitools.render import gpu_map_renderable, print_renderable

        print_renderable(gpu_map_renderable(gpu_map))
    return 0


async def _describe(kube: Any, args: argparse.Namespace) -> int:
    from paralleljob.clitools.describe import describe_job
    from paralleljob.clitools.dralists import DRA_SLICES, dra_list
    from paralleljob.k8s.edge.constants import JOB_LABEL, KIND, POD_GROUP_LABEL
    from paralleljob.k8s.runtime.api import ApiError, job_path, retrying

    namespace, _, name = args.job.rpartition("/")
    namespace = namespace or args.namespace
    try:
        body = await retrying(lambda: kube.request("GET", job_path(namespace, name)))
    except ApiError as exc:
        if exc.status == 404:
            print(f"paralleljob describe: no ParallelJob {namespace}/{name}", file=sys.stderr)
            return EXIT_API
        raise
    selector = f"involvedObject.name={name},involvedObject.kind={KIND}"
    # a pod group's pods are its owner's, found by the group label; the operator's workers by the job label
    group = str((body.get("spec") or {}).get("podGroup") or "")
    pod_selector = f"{POD_GROUP_LABEL}={group}" if group else f"{JOB_LABEL}={name}"
    (pods, _), (events, _) = await asyncio.gather(
        retrying(lambda: kube.list(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": pod_selector})),
        retrying(lambda: kube.list(f"/api/v1/namespaces/{namespace}/events", {"fieldSelector": selector})),
    )
    claims, slices = await asyncio.gather(
        dra_list(kube, f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"),
        dra_list(kube, DRA_SLICES),
    )
    description = describe_job(body, pods, events, claims, slices)
    if args.output == "json":
        print(json.dumps(description.to_json(), indent=2))
    else:
        from paralleljob.clitools.jobrender import description_renderable
        from paralleljob.clitools.render import print_renderable

        print_renderable(description_renderable(description))
    return 0


async def _drain(kube: Any, args: argparse.Namespace) -> int:
    from paralleljob.clitools.drain import parse_gpu_ref

    if bool(args.node) == bool(args.gpu):
        raise InvalidRequest("give either NODE or one or more --gpu NODE:IDX")
    targets: dict[str, list[int] | None] = {}
    if args.node:
        targets[args.node] = None
    for ref in args.gpu:
        node, index = parse_gpu_ref(ref)
        listed = targets.setdefault(node, [])
        assert listed is not None
        listed.append(index)
    for node, gpus in targets.items():
        await _drain_node(kube, node, gpus, args.undrain, args.dry_run, getattr(args, "now", False))
    return 0


async def _drain_node(
    kube: Any, node: str, gpus: list[int] | None, undrain: bool, dry_run: bool, now: bool = False
) -> None:
    from paralleljob.clitools.drain import plan
    from paralleljob.clitools.dralists import DRA_SLICES, dra_list
    from paralleljob.k8s.runtime.api import ApiError, retrying

    # a DRA node's GPUs are its ResourceSlice pool's devices (none listed: a device-plugin node, or no DRA API)
    slices = await dra_list(kube, DRA_SLICES, {"fieldSelector": f"spec.nodeName={node}"})
    for attempt in range(5):
        body = await retrying(lambda: kube.request("GET", f"/api/v1/nodes/{node}"))
        change = plan(body, gpus, undrain, slices=slices, now=now)
        if dry_run:
            print(json.dumps(change.patch, indent=2))
            return
        try:
            await kube.merge_patch(f"/api/v1/nodes/{node}", change.patch)
            break
        except ApiError as exc:
            if exc.status != 409 or attempt == 4:
                raise
    what = "node" if gpus is None else "GPU " + ",".join(map(str, sorted(gpus)))
    verb = "undrained" if undrain else "drained"
    cordon = "" if gpus is not None else (" and uncordoned" if undrain else " and cordoned")
    unhealthy = ",".join(map(str, sorted(change.unhealthy))) or "none"
    print(f"{node}: {what} {verb}{cordon}; unhealthy GPUs now: {unhealthy}")
    for note in change.notes:
        print(f"{node}: {note}")
    if not undrain:
        when = "at once" if now else "after they checkpoint (or the grace period)"
        print(f"{node}: the operator moves the jobs on these GPUs {when}; no restart is counted")

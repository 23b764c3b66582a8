"""``paralleljob dashboard``: the web view of the cluster, read-only, on one port (in a cluster: the chart's
optional Deployment, reached with ``kubectl port-forward``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "dashboard",
        help="web view: the topology coloured by job, each job's ranks, queues, failures (live, read-only)",
    )
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: $KUBECONFIG or in-cluster")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    # A flag only: no variable shaped like a service link's (<SERVICE>_PORT), which any Service can set.
    p.add_argument("--port", type=int, default=8090, help="(default: %(default)s)")
    p.add_argument("--topology-config", type=Path, help="YAML: topology label keys (as for the operator)")
    p.add_argument(
        "--dra-driver",
        default="gpu.nvidia.com",
        help="DRA driver whose ResourceSlices publish nodes' GPUs, as for the operator; empty: DRA off "
        "(default: %(default)s)",
    )
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # uvloop.run, not uvloop.install: install sets the process-wide loop policy, and every later
    # asyncio.run of the same process (tests calling this in process) silently ran on uvloop.
    try:
        import uvloop

        runner: Callable[[Coroutine[Any, Any, None]], None] = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is optional
        runner = asyncio.run
    from kubernetes_asyncio.config import ConfigException

    from paralleljob.k8s.runtime.api import ApiError

    try:
        runner(serve(args))
    except (ConfigException, OSError) as exc:  # no kubeconfig, the port taken, nothing listening: one line
        print(f"paralleljob dashboard: {exc}", file=sys.stderr)
        return 1
    except ApiError as exc:  # the API server unreachable or refusing us at the start
        print(f"paralleljob dashboard: {exc}", file=sys.stderr)
        return 1
    return 0


async def serve(args: argparse.Namespace) -> None:
    from aiohttp import web

    from paralleljob.dashboard.feed import Feed
    from paralleljob.dashboard.server import make_app
    from paralleljob.k8s.edge.config import DraConfig, TopologyConfig, load_topology_file
    from paralleljob.k8s.edge.parse.taintrules import TAINT_RULES_PATH
    from paralleljob.k8s.runtime.api import Kube
    from paralleljob.k8s.runtime.served import served_taint_rules_path

    config = load_topology_file(args.topology_config) if args.topology_config else TopologyConfig()
    # Each watch holds one connection of the client's pool for as long as it runs (eight with DRA on): the
    # pool must leave room for the lists and the job panel's reads, or they wait for ever (with 8 they did).
    kube = await Kube.connect(args.kubeconfig, concurrency=24)
    # One request before serving: with the API server unreachable the page would stay empty while the watches
    # retried in silence (walking the docs: "dashboard on http://..." and nothing else, for ever).
    try:
        await kube.request("GET", "/version")
    except BaseException:
        await kube.close()
        raise
    feed = Feed(kube, config, DraConfig(driver=args.dra_driver.strip()))
    reflectors = feed.reflectors(await served_taint_rules_path(kube) if feed.dra.enabled else TAINT_RULES_PATH)
    runner = web.AppRunner(make_app(feed), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.port).start()
    logging.getLogger("paralleljob.dashboard").info("dashboard on http://%s:%d/", args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[Any]] = [asyncio.create_task(r.run(), name=f"watch {r.name}") for r in reflectors]
    tasks.append(asyncio.create_task(feed.run(reflectors), name="pictures"))
    waiter: asyncio.Task[Any] = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for task in done:  # a watch that died (not a signal) ends the server with its error
        error = None if task is waiter else task.exception()
        if error is not None:
            raise error
    feed.close()
    await runner.cleanup()
    await kube.close()

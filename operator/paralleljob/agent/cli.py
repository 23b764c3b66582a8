"""``paralleljob agent``: the node GPU health agent (one per GPU node, as a DaemonSet).

``--once`` reads NVML one time and prints the readings and the verdict as JSON, writing nothing: the
one-command check on a real GPU machine. ``--fake-nvml SCRIPT`` replays a scripted NVML instead of the
real one. Exit codes: 0 done, 1 no cluster credentials or metrics port taken, 2 bad arguments or script, 3 NVML
is not available on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

EXIT_NO_CLUSTER = 1
EXIT_BAD_INPUT = 2
EXIT_NO_NVML = 3


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "agent",
        help="node GPU health agent: NVML health, ECC and XIDs to the node's annotation and GPUHealthy condition",
        description="Watch this node's GPUs through NVML and report their health on the Node object.",
    )
    p.add_argument("--node", default=os.environ.get("NODE_NAME"), help="this node's name (default: $NODE_NAME)")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: $KUBECONFIG or in-cluster")
    p.add_argument("--fake-nvml", type=Path, metavar="SCRIPT", help="replay this YAML/JSON script instead of NVML")
    p.add_argument("--once", action="store_true", help="read NVML once, print it as JSON, write nothing")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between polls (default: %(default)s)")
    # A flag only: no variable shaped like a service link's (<SERVICE>_PORT), which any Service can set.
    p.add_argument("--metrics-port", type=int, default=9410, help="(default: %(default)s)")
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.add_argument("--thermal-threshold", type=float, default=85.0, help="Degraded at or above, C (default: 85)")
    p.add_argument("--recover-polls", type=int, default=3, help="healthy polls before recovery (default: 3)")
    p.add_argument("--hold-seconds", type=float, default=60.0, help="minimum time down after the last fault")
    p.add_argument(
        "--dra-driver",
        default=os.environ.get("PARALLELJOB_DRA_DRIVER", "gpu.nvidia.com"),
        help="on a node with a ResourceSlice of this DRA driver, also write a DeviceTaintRule per unhealthy GPU"
        " (default: %(default)s; empty: never)",
    )
    p.add_argument("--log-level", default=os.environ.get("PARALLELJOB_LOG_LEVEL", "INFO"))
    p.set_defaults(handler=main)


def _source(args: argparse.Namespace) -> Any:
    if args.fake_nvml is None:
        from paralleljob.agent.pynvml_source import PynvmlSource

        return PynvmlSource()
    from paralleljob.agent.fake import FakeNvml, load_script

    return FakeNvml(load_script(args.fake_nvml))


def main(args: argparse.Namespace) -> int:
    from paralleljob.agent.classify import Thresholds
    from paralleljob.agent.fake import ScriptError
    from paralleljob.agent.hysteresis import Hysteresis
    from paralleljob.agent.nvml import NvmlUnavailable
    from paralleljob.agent.runner import AgentConfig

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.interval <= 0 or args.recover_polls < 1 or args.hold_seconds < 0:
        print("--interval must be > 0, --recover-polls >= 1, --hold-seconds >= 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    node = args.node or (socket.gethostname() if args.once else "")
    if not node:
        print("paralleljob agent: --node (or $NODE_NAME) is required", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = AgentConfig(
        node=node,
        interval_s=args.interval,
        thresholds=Thresholds(thermal_c=args.thermal_threshold),
        hysteresis=Hysteresis(recover_polls=args.recover_polls, hold_seconds=args.hold_seconds),
        dra_driver=args.dra_driver.strip(),
    )
    try:
        source = _source(args)
        source.open()
    except ScriptError as exc:
        print(f"paralleljob agent: bad --fake-nvml script: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NvmlUnavailable as exc:
        print(
            f"paralleljob agent: NVML is not available on this machine: {exc}.\n"
            "Run the agent on a GPU node with the NVIDIA driver (see docs/agent.md), or pass"
            " --fake-nvml SCRIPT to replay a scripted GPU.",
            file=sys.stderr,
        )
        return EXIT_NO_NVML
    try:
        if args.once:
            return _once(config, source)
        return asyncio.run(_serve(config, source, args))
    finally:
        source.close()


def _once(config: Any, source: Any) -> int:
    from paralleljob.agent.monitor import Monitor
    from paralleljob.agent.runner import signals_of

    xids = source.wait_xids(0.0)
    result = Monitor(config.thresholds, config.hysteresis).step(source.sample(), xids, 0.0)
    agent_blocking, detail, (status, reason, message) = signals_of(result)
    report = {
        "node": config.node,
        "sample": result.sample.to_json(),
        "xids": [{"gpu": x.gpu, "xid": x.code} for x in result.xids],
        "gpus": {
            str(i): {"state": t.state.value, "findings": [f"{f.reason}: {f.message}" for f in t.findings]}
            for i, t in sorted(result.tracks.items())
        },
        "would_write": {
            "unhealthy-gpus": ",".join(map(str, sorted(agent_blocking))),
            "gpu-health": detail,
            "GPUHealthy": {"status": status, "reason": reason, "message": message},
        },
    }
    print(json.dumps(report, indent=2))
    return 0


async def _serve(config: Any, source: Any, args: argparse.Namespace) -> int:
    from kubernetes_asyncio.config import ConfigException

    from paralleljob.agent.kube import NodeClient
    from paralleljob.agent.metrics import AgentMetrics, serve
    from paralleljob.agent.runner import Agent

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    metrics = AgentMetrics(stale_after_s=max(60.0, 6 * config.interval_s))
    try:
        nodes = await NodeClient.connect(config.node, args.kubeconfig)
    except ConfigException as exc:
        print(f"paralleljob agent: no cluster credentials (in-cluster or --kubeconfig): {exc}", file=sys.stderr)
        return EXIT_NO_CLUSTER
    try:
        server = await serve(metrics, args.metrics_host, args.metrics_port)
    except OSError as exc:
        await nodes.close()
        print(f"paralleljob agent: cannot serve metrics on port {args.metrics_port}: {exc}", file=sys.stderr)
        return EXIT_NO_CLUSTER
    logging.getLogger("paralleljob.agent").info(
        "agent for node %s: polling every %.1f s, metrics on %s:%d",
        config.node,
        config.interval_s,
        args.metrics_host,
        args.metrics_port,
    )
    try:
        await Agent(config, source, nodes, metrics).run(stop)
    finally:
        await nodes.close()
        await server.cleanup()
    return 0

"""``paralleljob operator``: run the operator (the demo and the benchmarks are in ``paralleljob.devtools.cli``)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from paralleljob.core.errors import InvalidRequest
from paralleljob.k8s.edge.config import DEFAULT_WRITE_CONCURRENCY
from paralleljob.k8s.edge.constants import QUEUE_POLICIES


def register(subparsers: Any) -> None:
    op = subparsers.add_parser(
        "operator",
        help="run the ParallelJob operator against $KUBECONFIG or in-cluster",
        description="Watch ParallelJobs, Nodes and Pods; place, bind and repair gangs of workers.",
    )
    op.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: $KUBECONFIG or in-cluster")
    op.add_argument("--namespace", action="append", default=[], help="watch only these namespaces (repeatable)")
    # A flag only: a variable named like PARALLELJOB_METRICS_PORT is what Kubernetes' service links set for a
    # Service paralleljob-metrics (the chart's own, under the README's release name), to "tcp://<ip>:8080".
    op.add_argument("--metrics-port", type=int, default=8080, help="(default: %(default)s)")
    op.add_argument("--metrics-host", default="0.0.0.0")
    op.add_argument(
        "--resync-seconds",
        type=float,
        default=30.0,
        help="a reconcile pass over everything at least this often (default: %(default)s)",
    )
    op.add_argument(
        "--relist-seconds",
        type=float,
        default=300.0,
        help="each watched kind is listed again this often, beside its watch (default: %(default)s)",
    )
    op.add_argument(
        "--view-check-passes",
        type=int,
        default=1000,
        help="compare the kept cluster view with a rebuild every N passes, 0: never by count (default: %(default)s)",
    )
    op.add_argument(
        "--view-check-seconds",
        type=float,
        default=300.0,
        help="... and at least every this many seconds, 0: never by time (default: %(default)s)",
    )
    op.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    op.add_argument("--lease-name", default="paralleljob-operator")
    op.add_argument("--lease-duration", type=float, default=15.0, help="seconds (default: %(default)s)")
    op.add_argument("--identity", default=os.environ.get("POD_NAME", ""), help="leader-election identity")
    op.add_argument("--topology-config", type=Path, help="YAML: topology label keys and bandwidths")
    op.add_argument(
        "--max-gpus-per-node",
        type=int,
        default=None,
        help="cap on a node's allocatable GPUs (default: the topology file's maxGpusPerNode, else 16)",
    )
    op.add_argument(
        "--best-effort-fifo",
        action="store_true",
        help="let smaller jobs pass a queue head that does not fit (default: strict FIFO)",
    )
    op.add_argument(
        "--queue-policy",
        default="strict-fifo",
        choices=QUEUE_POLICIES,
        help="admission: the per-queue FIFO, or the core's pass with fair share, backfill, preemption"
        " (default: %(default)s)",
    )
    op.add_argument(
        "--preemption-grace-seconds",
        type=float,
        default=30.0,
        help="a preempted job's time to checkpoint before its pods are deleted (default: %(default)s)",
    )
    op.add_argument(
        "--dra-driver",
        default=os.environ.get("PARALLELJOB_DRA_DRIVER", "gpu.nvidia.com"),
        help="DRA driver whose ResourceSlices publish nodes' GPUs; empty: DRA off (default: %(default)s)",
    )
    op.add_argument(
        "--dra-device-class",
        default=os.environ.get("PARALLELJOB_DRA_DEVICE_CLASS", "gpu.nvidia.com"),
        help="DeviceClass of full GPUs that the operator's ResourceClaims request (default: %(default)s)",
    )
    op.add_argument(
        "--write-concurrency",
        type=int,
        default=DEFAULT_WRITE_CONCURRENCY,
        help="API requests in flight (default: %(default)s)",
    )
    op.add_argument(
        "--background-chains",
        type=int,
        default=512,
        help="waiting jobs' status-only writes started at once; the rest wait for a later pass (default: %(default)s)",
    )
    op.add_argument(
        "--waiting-message-refresh",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="rewrite a waiting job's message that only restates its wait with new figures at most this often;"
        " 0: whenever it changes (default: %(default)s)",
    )
    op.add_argument("--log-level", default=os.environ.get("PARALLELJOB_LOG_LEVEL", "INFO"))
    op.set_defaults(handler=_operator)


def _operator(args: argparse.Namespace) -> int:
    from paralleljob.k8s.edge.config import DraConfig, OperatorConfig, TopologyConfig, load_topology_file
    from paralleljob.k8s.runtime.runner import OperatorFailed, run_operator

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        topology = load_topology_file(args.topology_config) if args.topology_config else TopologyConfig()
        if args.max_gpus_per_node is not None:
            topology = dataclasses.replace(topology, max_gpus_per_node=args.max_gpus_per_node)
    except (InvalidRequest, OSError) as exc:
        print(f"bad --topology-config: {exc}", file=sys.stderr)
        return 2
    config = OperatorConfig(
        topology=topology,
        dra=DraConfig(driver=args.dra_driver.strip(), device_class=args.dra_device_class.strip()),
        namespaces=tuple(args.namespace),
        resync_seconds=args.resync_seconds,
        relist_seconds=args.relist_seconds,
        view_check_passes=args.view_check_passes,
        view_check_seconds=args.view_check_seconds,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        lease_name=args.lease_name,
        lease_namespace=args.lease_namespace,
        lease_duration_seconds=args.lease_duration,
        identity=args.identity,
        strict_fifo=not args.best_effort_fifo,
        queue_policy=args.queue_policy,
        preemption_grace_seconds=args.preemption_grace_seconds,
        write_concurrency=max(1, args.write_concurrency),
        background_chains=max(1, args.background_chains),
        waiting_message_refresh_s=max(0.0, args.waiting_message_refresh),
        crash_after_binds=int(os.environ.get("PARALLELJOB_CRASH_AFTER_BINDS", "0") or 0),
        kill_task=os.environ.get("PARALLELJOB_KILL_TASK", ""),
    )
    try:  # optional: uvloop's event loop makes the operator's HTTP and TLS handling markedly cheaper
        import uvloop

        runner: Callable[[Coroutine[Any, Any, None]], None] = uvloop.run
    except ImportError:
        runner = asyncio.run
    from kubernetes_asyncio.config import ConfigException

    try:
        runner(run_operator(config, args.kubeconfig))
    except OperatorFailed as exc:
        print(f"paralleljob operator stopped: {exc}", file=sys.stderr)
        return 1
    except ConfigException as exc:  # no kubeconfig and not in a pod: the message says how to name one
        print(f"paralleljob operator: {exc}", file=sys.stderr)
        return 1
    return 0

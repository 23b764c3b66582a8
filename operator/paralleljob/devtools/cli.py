"""``paralleljob demo-cluster`` (the live demo on the local control plane) and ``paralleljob bench-operator``
(the operator benchmark): developer commands, kept out of the shipped operator package."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from paralleljob.k8s.edge.config import DEFAULT_WRITE_CONCURRENCY


def register(subparsers: Any) -> None:
    demo = subparsers.add_parser(
        "demo-cluster",
        help="live demo: local control plane with GPU nodes, the operator, example jobs, a node failure",
    )
    demo.add_argument("--nodes", type=int, default=8)
    demo.add_argument("--down", action="store_true", help="stop a demo left running")
    demo.add_argument("--no-wait", action="store_true", help="do not wait for Ctrl-C at the end")
    demo.set_defaults(handler=_demo)

    bench = subparsers.add_parser("bench-operator", help="operator benchmark on the local control plane")
    bench.add_argument("--nodes", type=int, default=16)
    bench.add_argument("--jobs", type=int, default=32, help="jobs in the throughput stream")
    bench.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    bench.add_argument("--repeats", type=int, default=5, help="samples of each latency (default: %(default)s)")
    bench.add_argument("--rounds", type=int, default=3, help="throughput rounds per contender (default: %(default)s)")
    bench.add_argument("--no-kube-scheduler", action="store_true", help="skip the kube-scheduler comparison")
    bench.add_argument(
        "--write-concurrency",
        type=int,
        default=DEFAULT_WRITE_CONCURRENCY,
        help="the operator's API requests in flight",
    )
    bench.set_defaults(handler=_bench)


def _demo(args: argparse.Namespace) -> int:
    from paralleljob.devtools.demo_cluster import main

    return int(main(args))


def _bench(args: argparse.Namespace) -> int:
    from paralleljob.devtools.bench_operator import main

    return int(main(args))

"""The options of ``paralleljob bench kueue`` (issue 41), apart from the ``bench`` command's shared ones: the
cluster, the placement sets, the ceiling, the throughput drains and the repair. Read by
``devtools/bench_kueue*.py``; kept out of ``bench.py`` only for its size, and light to import (the CLI builds
every subcommand's parser at start)."""

from __future__ import annotations

import argparse

from paralleljob.k8s.edge.config import DEFAULT_WRITE_CONCURRENCY


def add_kueue_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kueue-nodes", type=int, default=64, help="kueue: kwok nodes (32 a rack)")
    parser.add_argument(
        "--kueue-big-gangs", type=int, default=3, help="kueue: gangs larger than a half-full rack's free GPUs"
    )
    parser.add_argument(
        "--kueue-background", choices=("packed", "churned"), default="packed", help="kueue placement's background"
    )
    parser.add_argument(
        "--kueue-nvl72",
        type=int,
        default=0,
        metavar="RACKS",
        help="kueue placement: on this many GB200 NVL72 racks (trays of 4 GPUs, a clique each) instead of HGX nodes",
    )
    parser.add_argument(
        "--kueue-parts",
        default="placement",
        help="kueue: placement, or any of ceiling,burst,throughput,repair (one cluster)",
    )
    parser.add_argument("--ceiling-pods", type=int, default=2000, help="kueue ceiling: pods per pass")
    parser.add_argument("--ceiling-concurrency", type=int, default=64, help="kueue ceiling: concurrent workers")
    parser.add_argument(
        "--ceiling-rounds", type=int, default=1, help="kueue ceiling: run the passes this many times, rotated; medians"
    )
    parser.add_argument("--burst-gangs", type=int, default=50, help="kueue burst: gangs created at once by each side")
    parser.add_argument("--burst-pods", type=int, default=40, help="kueue burst: one-GPU pods a gang")
    parser.add_argument("--flow-jobs", type=int, default=500, help="kueue throughput: jobs drained by each side")
    parser.add_argument("--flow-queues", type=int, default=100, help="kueue throughput: queues (10 a cohort)")
    parser.add_argument("--flow-run-min", type=float, default=1.0, help="kueue throughput: shortest run (s)")
    parser.add_argument("--flow-run-max", type=float, default=10.0, help="kueue throughput: longest run (s)")
    parser.add_argument(
        "--flow-first", choices=("kueue", "ours"), default="kueue", help="kueue throughput: who drains first"
    )
    parser.add_argument(
        "--flow-sides", choices=("both", "kueue", "ours"), default="both", help="kueue throughput: who drains"
    )
    parser.add_argument(
        "--flow-clusters",
        choices=("shared", "fresh"),
        default="shared",
        help="kueue throughput: both sides on one cluster, emptied between them (shared), or each side on a"
        " fresh cluster with only its own controllers, the ceiling on the first and the repair on a third",
    )
    parser.add_argument(
        "--kueue-qps",
        type=int,
        default=0,
        help="kueue parts: Kueue's API client limit (burst twice that); default 0: its shipped 50/100",
    )
    parser.add_argument(
        "--pod-gc-threshold",
        type=int,
        default=0,
        help="kueue parts: run kube-controller-manager's pod GC keeping this many terminated pods (a real"
        " cluster's default is 12500); default 0: no pod GC, every finished pod stays",
    )
    parser.add_argument(
        "--flow-race",
        type=float,
        default=0.0,
        help="kueue throughput: stop the second side once it has run this many times the first side's drain"
        " (0: each runs to --drain-timeout)",
    )
    parser.add_argument(
        "--operator-write-concurrency",
        type=int,
        default=DEFAULT_WRITE_CONCURRENCY,
        help="kueue parts: the operator's API requests in flight (its --write-concurrency; default: its own,"
        " %(default)s)",
    )
    parser.add_argument("--repair-samples", type=int, default=5, help="kueue repair: node failures per side")
    parser.add_argument(
        "--repair-wave-gangs",
        type=int,
        default=0,
        help="kueue repair: also measure each side's repair 1 s into a wave of this many gangs of --burst-pods"
        " one-GPU pods (default 0: on an idle cluster only)",
    )

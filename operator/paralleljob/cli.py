"""The `paralleljob` command line (also installed as the kubectl plugin `kubectl-paralleljob`).

Each sub-command lives in its own module exposing ``register(subparsers)``; this file only wires them,
so that importing the CLI never pulls in a Kubernetes client unless that command runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that contribute sub-commands, in help order. Each exposes register(subparsers).
COMMAND_MODULES = (
    "paralleljob.demo",
    "paralleljob.bench",
    "paralleljob.devcluster.cli",
    "paralleljob.sim.cli",
    "paralleljob.k8s.runtime.cli",
    "paralleljob.devtools.cli",
    "paralleljob.clitools.cli",
    "paralleljob.dashboard.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paralleljob",
        description="Topology-aware gang scheduler for TP x PP x DP GPU training on Kubernetes.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only tolerate the module itself being absent, never a broken import inside it.
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


INTERRUPTED = 128 + 2  # a shell's status for a command ended by SIGINT


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.handler(args)
    except KeyboardInterrupt:
        # Ctrl-C is an answer, not a fault: the command's own cleanup (clusters, child processes) has run
        print(f"paralleljob {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

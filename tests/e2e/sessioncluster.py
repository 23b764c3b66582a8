"""The one way the e2e suites bring up their session's dev cluster: progress shown live even under output
capture (a cold build is silent for many minutes otherwise), an already running cluster reused when its
environment variable names one, abandoned clusters of the same prefix reaped first, and the cluster taken
down at the end, failures included (``die_with_caller``: even a SIGKILLed pytest takes it with it)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from paralleljob.devcluster.cluster import DevCluster, down, get, reap_abandoned, up
from paralleljob.devcluster.nodes import NodeShape


@contextmanager
def session_cluster(
    pytestconfig: pytest.Config,
    prefix: str,
    shape: NodeShape,
    reuse_variable: str,
    usable: Callable[[DevCluster], bool] = lambda _: True,
    **options: Any,
) -> Iterator[DevCluster]:
    """A dev cluster named ``<prefix><pid>`` of ``shape`` (``options`` go to ``up``), or the running one that
    ``$reuse_variable`` names (left running); ``usable`` says whether a reused cluster fits the suite."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    tag = f"[dev-cluster {prefix.removeprefix('e2e-').strip('-')}]".replace(" ]", "]")

    def progress(message: str) -> None:
        if capture is None:
            print(message, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(f"{tag} {message}", flush=True)

    reuse = os.environ.get(reuse_variable)
    if reuse:
        cluster = get(reuse)
        if cluster is None or not usable(cluster):
            pytest.fail(f"{reuse_variable}={reuse} but no running dev cluster of that name fits this suite")
        yield cluster
        return
    reap_abandoned(prefix, report=progress)
    name = f"{prefix}{os.getpid()}"
    cluster = up(name, shape, report=progress, die_with_caller=True, **options)
    try:
        yield cluster
    finally:
        down(name, report=progress)

"""Run the operator: metrics server, leader election, Kopf watches and the reconcile loop, in one event
loop, until a signal (Kopf handles SIGINT/SIGTERM), a lost lease, or ``stop`` is set."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import kopf

from paralleljob.k8s.api import Kube
from paralleljob.k8s.config import OperatorConfig
from paralleljob.k8s.election import LeaderElection
from paralleljob.k8s.handlers import build_registry
from paralleljob.k8s.metrics import Metrics, serve
from paralleljob.k8s.reconciler import Reconciler
from paralleljob.k8s.reflector import Reflector

log = logging.getLogger("paralleljob.k8s")


async def run_operator(
    config: OperatorConfig, kubeconfig: str | None = None, stop: asyncio.Event | None = None
) -> None:
    config = config.with_identity()
    kube = await Kube.connect(kubeconfig, config.write_concurrency)
    metrics = Metrics()
    try:
        web = await serve(metrics, config.metrics_host, config.metrics_port)
    except OSError:
        await kube.close()
        raise
    log.info("metrics on http://%s:%d/metrics; identity %s", config.metrics_host, config.metrics_port, config.identity)
    reconciler = Reconciler(kube, config, metrics)
    election = LeaderElection(
        kube, config.lease_namespace, config.lease_name, config.identity, config.lease_duration_seconds
    )
    stop_flag = asyncio.Event()
    registry = build_registry(reconciler, kube.configuration)

    async def follow_leadership() -> None:
        await election.leader.wait()
        metrics.leader.set(1)
        reconciler.leader.set()
        reconciler.wake.set()
        await election.lost.wait()
        metrics.leader.set(0)
        reconciler.leader.clear()
        stop_flag.set()  # a replica that lost its lease restarts clean rather than act on a stale view

    async def initial_sync() -> None:
        delay = 0.2
        while True:
            try:
                await reconciler.resync()
                return
            except Exception as exc:  # the API may not be reachable yet
                log.warning("initial list failed (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def external_stop() -> None:
        if stop is not None:
            await stop.wait()
            stop_flag.set()

    # Every long-lived task exists before Kopf starts: Kopf waits 5 s on shutdown for tasks born after it.
    reconciler.events.start()
    kopf_task = asyncio.create_task(
        kopf.operator(
            registry=registry,
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            standalone=True,
            stop_flag=stop_flag,
        ),
        name="kopf",
    )
    pods = Reflector(
        kube, "/api/v1/pods", reconciler.on_pod_list, lambda kind, body: reconciler.on_event("pod", kind, body)
    )
    helpers = [
        asyncio.create_task(pods.run(), name="pod-reflector"),
        asyncio.create_task(election.run(), name="leader-election"),
        asyncio.create_task(follow_leadership(), name="leadership"),
        asyncio.create_task(initial_sync(), name="initial-sync"),
        asyncio.create_task(reconciler.run(), name="reconciler"),
        asyncio.create_task(external_stop(), name="stop"),
    ]
    try:
        await kopf_task
    finally:
        for task in helpers:
            task.cancel()
        for task in helpers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await election.release()
        await web.cleanup()
        await kube.close()
        log.info("operator stopped")

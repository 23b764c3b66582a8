"""Run the operator: metrics server, leader election, Kopf watches and the reconcile loop, in one event
loop, until a signal (Kopf handles SIGINT/SIGTERM), a lost lease, ``stop``, or the death of any of them.

Every long-lived task is supervised: one that ends while the operator should be running (an exception, an
unexpected return or cancellation) stops the whole process with a log line naming it, and
:class:`OperatorFailed` makes the command exit non-zero, so the Deployment restarts a clean replica instead
of keeping one that looks alive and does nothing. ``/healthz`` reports the same, and also a reconcile loop
that has not passed for too long or a pod watch cut off for too long (:mod:`paralleljob.k8s.runtime.health`).
Losing the lease cancels every write in flight at once and stops the process too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

import kopf

from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.edge.dra import CLAIMS_PATH, SLICES_PATH
from paralleljob.k8s.edge.taintrules import TAINT_RULES_PATH
from paralleljob.k8s.runtime.api import ApiError, Kube
from paralleljob.k8s.runtime.election import LeaderElection
from paralleljob.k8s.runtime.handlers import build_registry
from paralleljob.k8s.runtime.health import Health
from paralleljob.k8s.runtime.metrics import Metrics, serve
from paralleljob.k8s.runtime.reconciler import Reconciler
from paralleljob.k8s.runtime.reflector import Reflector

log = logging.getLogger("paralleljob.k8s")

# How long the pod watch may stay cut off before /healthz says so (it resumes by itself within seconds
# when the API server is reachable at all).
MAX_WATCH_DOWN_S = 120.0


LINGER_UNHEALTHY_S = 1.0


class OperatorFailed(RuntimeError):
    """The operator stopped because something it depends on died or it lost its lease."""


async def run_operator(
    config: OperatorConfig, kubeconfig: str | None = None, stop: asyncio.Event | None = None
) -> None:
    config = config.with_identity()
    kube = await Kube.connect(kubeconfig, config.write_concurrency)
    loop = asyncio.get_running_loop()
    metrics = Metrics()
    election = LeaderElection(
        kube, config.lease_namespace, config.lease_name, config.identity, config.lease_duration_seconds
    )
    health = Health(
        max_pass_age_s=3 * config.resync_seconds + 10, max_watch_down_s=MAX_WATCH_DOWN_S, started_at=loop.time()
    )
    try:
        web = await serve(
            metrics, config.metrics_host, config.metrics_port, lambda: health.verdict(loop.time(), election.leading())
        )
    except OSError:
        await kube.close()
        raise
    log.info("metrics on http://%s:%d/metrics; identity %s", config.metrics_host, config.metrics_port, config.identity)
    reconciler = Reconciler(kube, config, metrics)
    reconciler.on_pass = lambda: health.passed(loop.time())
    kube.write_fence = election.leading  # no write leaves this process unless it still leads
    stop_flag = asyncio.Event()
    registry = build_registry(reconciler, kube.configuration)
    failure: list[str] = []

    async def follow_leadership() -> None:
        await election.leader.wait()
        metrics.leader.set(1)
        reconciler.leader.set()
        reconciler.wake.set()
        await election.lost.wait()
        metrics.leader.set(0)
        reconciler.stop_acting()
        raise OperatorFailed("lost the leader lease; stopping so a clean replica starts as a standby")

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
        kube,
        "/api/v1/pods",
        reconciler.on_pod_list,
        lambda kind, body: reconciler.on_event("pod", kind, body),
        lambda connected: health.watch_up() if connected else health.watch_down(loop.time()),
    )
    supervised: dict[asyncio.Task[Any], bool] = {}  # task -> whether it must run until the end

    def start(coro: Coroutine[Any, Any, None], name: str, forever: bool = True) -> None:
        supervised[asyncio.create_task(coro, name=name)] = forever

    start(pods.run(), "pod-watch")
    if config.dra.enabled:
        # ResourceSlices (GPUs of DRA nodes) and ResourceClaims (devices others hold): the same list-and-watch.
        for kind, path in (("resourceslice", SLICES_PATH), ("resourceclaim", CLAIMS_PATH)):
            start(_dra_reflector(kube, reconciler, kind, path).run(), f"{kind}-watch")
        # DeviceTaintRules (resource.k8s.io/v1beta2): optional; a cluster without them ends this task.
        start(_watch_taint_rules(kube, reconciler), "devicetaintrule-watch", forever=False)
    start(election.run(), "leader-election")
    start(follow_leadership(), "leadership")
    start(initial_sync(), "initial-sync", forever=False)
    start(reconciler.run(), "reconciler")
    start(external_stop(), "stop", forever=False)
    if config.kill_task:
        start(_kill_later(config.kill_task, supervised), "test-hook", forever=False)
    try:
        await _supervise(kopf_task, supervised, stop_flag, health, failure)
    finally:
        for task in supervised:
            task.cancel()
        for task in supervised:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await election.release()
        if failure:
            await asyncio.sleep(LINGER_UNHEALTHY_S)  # let a probe (or a person) see /healthz say why
        await web.cleanup()
        await kube.close()
        log.info("operator stopped")
    if failure:
        raise OperatorFailed(failure[0])


def _dra_reflector(kube: Kube, reconciler: Reconciler, kind: str, path: str) -> Reflector:
    def on_list(items: list[dict[str, Any]], version: str | None) -> None:
        reconciler.on_list(kind, items, version)

    def on_event(event: str, body: Mapping[str, Any]) -> None:
        reconciler.on_event(kind, event, body)

    return Reflector(kube, path, on_list, on_event)


async def _watch_taint_rules(kube: Kube, reconciler: Reconciler) -> None:
    """List and watch DeviceTaintRules, or, when the API has none to give (404: a cluster before 1.36 or
    without resource.k8s.io/v1beta2; 403: a role without the verbs), say so once and stop watching."""
    delay = 0.2
    while True:
        try:
            await kube.list(TAINT_RULES_PATH)
            break
        except ApiError as exc:
            if exc.status in (403, 404):
                reconciler.rules_unavailable(exc)
                return
            await asyncio.sleep(delay)  # the API may not be reachable yet
            delay = min(delay * 2, 5.0)
    await _dra_reflector(kube, reconciler, "devicetaintrule", TAINT_RULES_PATH).run()


async def _supervise(
    kopf_task: asyncio.Task[Any],
    supervised: dict[asyncio.Task[Any], bool],
    stop_flag: asyncio.Event,
    health: Health,
    failure: list[str],
) -> None:
    """Wait for Kopf to end; the first supervised task that ends while it should not stops everything."""
    pending: set[asyncio.Task[Any]] = {kopf_task, *supervised}
    while kopf_task in pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is kopf_task:
                continue
            why = _why_ended(task)
            if not supervised[task] and why == "":
                continue  # a finite task that finished its work
            if stop_flag.is_set():
                continue  # shutting down anyway
            message = f"{task.get_name()} {why or 'returned'}"
            log.critical("the operator's task %s: stopping the operator", message)
            health.died(task.get_name(), why or "returned")
            failure.append(message)
            stop_flag.set()
    if kopf_task.done() and not kopf_task.cancelled() and kopf_task.exception() is not None:
        raise kopf_task.exception()  # type: ignore[misc]


def _why_ended(task: asyncio.Task[Any]) -> str:
    if task.cancelled():
        return "was cancelled"
    exc = task.exception()
    if exc is None:
        return ""
    if isinstance(exc, OperatorFailed):
        return str(exc)
    return f"died: {exc!r}"


async def _kill_later(spec: str, supervised: dict[asyncio.Task[Any], bool]) -> None:
    """The ``kill_task`` test hook: cancel a supervised task by name, as a crash of it would end it."""
    name, _, seconds = spec.partition(":")
    await asyncio.sleep(float(seconds or 0))
    for task in supervised:
        if task.get_name() == name:
            log.warning("test hook: killing task %s", name)
            task.cancel()

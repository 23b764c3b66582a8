"""Run the operator: metrics server, leader election, one list-and-watch reflector per watched kind and the
reconcile loop, in one event loop, until SIGINT/SIGTERM, a lost lease, ``stop``, or the death of any of them.

Every long-lived task is supervised: one that ends while the operator should be running (an exception, an
unexpected return or cancellation) stops the whole process with a log line naming it, and
:class:`OperatorFailed` makes the command exit non-zero, so the Deployment restarts a clean replica instead
of keeping one that looks alive and does nothing. ``/healthz`` reports the same, and also a reconcile loop
that has not passed for too long or a pod watch cut off for too long (:mod:`paralleljob.k8s.runtime.observe.health`).
Losing the lease cancels every write in flight at once and stops the process too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from paralleljob.k8s.edge.config import OperatorConfig
from paralleljob.k8s.edge.constants import GROUP, MANAGED_LABEL, MANAGED_VALUE, PLURAL, QUEUE_PLURAL, VERSION
from paralleljob.k8s.edge.parse.compositegroups import composite_groups_path
from paralleljob.k8s.edge.parse.dra import CLAIMS_PATH, SLICES_PATH
from paralleljob.k8s.edge.parse.nativegroups import (
    pod_groups_path,
    workloads_path,
)
from paralleljob.k8s.edge.render.computedomain import DOMAINS_PATH
from paralleljob.k8s.runtime.api import Kube
from paralleljob.k8s.runtime.leaderthread import ElectionThread
from paralleljob.k8s.runtime.memory import gctuning, memtrim
from paralleljob.k8s.runtime.observe.health import Health
from paralleljob.k8s.runtime.observe.metrics import Metrics, serve
from paralleljob.k8s.runtime.reconciler import Reconciler
from paralleljob.k8s.runtime.reflector import Receiver, Reflector, Watched
from paralleljob.k8s.runtime.served import ServedApis, served_apis

log = logging.getLogger("paralleljob.k8s")

# How long the pod watch may stay cut off before /healthz says so (it resumes by itself within seconds
# when the API server is reachable at all).
MAX_WATCH_DOWN_S = 120.0


LINGER_UNHEALTHY_S = 1.0


# How the operator says it stepped down: its exit message whichever of its tasks notices first (the chaos run
# tells a step-down from a crash by it).
LEASE_LOST = "lost the leader lease; stopping so a clean replica starts as a standby"


class OperatorFailed(RuntimeError):
    """The operator stopped because something it depends on died or it lost its lease."""


async def run_operator(
    config: OperatorConfig, kubeconfig: str | None = None, stop: asyncio.Event | None = None
) -> None:
    config = config.with_identity()
    kube = await Kube.connect(kubeconfig, config.write_concurrency)
    loop = asyncio.get_running_loop()
    metrics = Metrics()
    # The election runs on a thread of its own with its own client: a busy main loop cannot starve it.
    election = ElectionThread(
        lambda: Kube.connect(kubeconfig, 4),
        config.lease_namespace,
        config.lease_name,
        config.identity,
        config.lease_duration_seconds,
        observe=metrics.observe_renewal,
    )
    try:
        await election.start()
    except BaseException:
        await kube.close()
        raise
    health = Health(
        max_pass_age_s=3 * config.resync_seconds + 10, max_watch_down_s=MAX_WATCH_DOWN_S, started_at=loop.time()
    )
    try:
        web = await serve(
            metrics, config.metrics_host, config.metrics_port, lambda: health.verdict(loop.time(), election.leading())
        )
    except OSError as exc:
        # A busy port is a setting to change, not a crash: one line naming the port and the flag (as the agent)
        election.stop()
        await kube.close()
        raise OperatorFailed(
            f"cannot serve /metrics and /healthz on {config.metrics_host}:{config.metrics_port}"
            f" ({exc.strerror or exc}): choose another port with --metrics-port"
        ) from exc
    log.info("metrics on http://%s:%d/metrics; identity %s", config.metrics_host, config.metrics_port, config.identity)
    reconciler = Reconciler(kube, config, metrics)
    reconciler.on_pass = lambda: health.passed(loop.time())
    kube.write_fence = election.leading  # no write leaves this process unless it still leads
    kube.observe = metrics.observe_request
    stop_flag = asyncio.Event()
    failure: list[str] = []

    async def follow_leadership() -> None:
        await election.leader.wait()
        metrics.leader.set(1)
        reconciler.leader.set()
        reconciler.wake.set()
        await election.lost.wait()
        metrics.leader.set(0)
        reconciler.stop_acting()
        raise OperatorFailed(LEASE_LOST)

    async def run_election() -> None:
        await election.run()
        if election.lost.is_set():  # it returned because it stepped down: say so, not "returned"
            raise OperatorFailed(LEASE_LOST)

    reflectors = _reflectors(kube, reconciler, config, health, loop, await served_apis(kube, config.dra.enabled))

    async def initial_sync() -> None:
        """The first pass waits until every kind has been listed once."""
        await asyncio.gather(*(r.synced.wait() for r in reflectors))
        reconciler.synced.set()
        reconciler.wake.set()

    async def external_stop() -> None:
        if stop is not None:
            await stop.wait()
            stop_flag.set()

    supervised: dict[asyncio.Task[Any], bool] = {}  # task -> whether it must run until the end

    def start(coro: Coroutine[Any, Any, None], name: str, forever: bool = True) -> None:
        supervised[asyncio.create_task(coro, name=name)] = forever

    reconciler.events.start()
    for reflector in reflectors:
        start(reflector.run(), f"{reflector.name}-watch")
    start(run_election(), "leader-election")
    start(follow_leadership(), "leadership")
    start(initial_sync(), "initial-sync", forever=False)
    start(reconciler.run(), "reconciler")
    start(external_stop(), "stop", forever=False)
    if config.tune_gc:
        thresholds = gctuning.tune()
        start(
            gctuning.full_collections(
                metrics.observe_gc, ready=lambda: election.after_next_renewal(config.lease_duration_seconds)
            ),
            "scheduled-gc",
        )
        trim = memtrim.malloc_trim()
        if trim is not None:
            start(memtrim.release_free_memory(trim, metrics.heap_released.inc), "heap-trim")
    if config.kill_task:
        start(_kill_later(config.kill_task, supervised), "test-hook", forever=False)
    signals = _on_signals(loop, stop_flag)
    try:
        await _supervise(supervised, stop_flag, health, failure)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        for task in supervised:
            task.cancel()
        for task in supervised:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await election.release()
        if failure:
            await asyncio.sleep(LINGER_UNHEALTHY_S)  # let a probe (or a person) see /healthz say why
        if config.tune_gc:
            gctuning.restore(thresholds)
        await web.cleanup()
        await kube.close()
        log.info("operator stopped")
    if failure:
        raise OperatorFailed(failure[0])


def _reflector(
    kube: Kube,
    reconciler: Reconciler,
    kind: str,
    watched: Watched,
    namespace: str | None = None,
    on_state: Callable[[bool], None] | None = None,
) -> Reflector:
    """A reflector feeding one kind's store (of one namespace, when ParallelJobs are watched per namespace)."""

    def on_list(items: list[dict[str, Any]], version: str | None) -> None:
        # the reflector slimmed each page with the store's own slimming as it arrived (unchanged objects: the
        # stored bodies themselves, ObjectStore.slim_listed)
        reconciler.on_list(kind, items, version, namespace=namespace, slimmed=True)

    def on_event(event: str, body: Mapping[str, Any]) -> None:
        reconciler.on_event(kind, event, body)

    def on_listed(name: str, seconds: float) -> None:
        reconciler.metrics.list_duration.labels(kind=kind).observe(seconds)

    store = reconciler.by_kind[kind]
    name = kind if namespace is None else f"{kind}[{namespace}]"
    # the store's listing: tombstones laid while a list is fetched outlive it (view/store.py)
    receiver = Receiver(on_list, on_event, on_state, store.slim_listed, store.listing, on_listed)
    return Reflector(kube, dataclasses.replace(watched, name=name), receiver)


def _reflectors(
    kube: Kube,
    reconciler: Reconciler,
    config: OperatorConfig,
    health: Health,
    loop: asyncio.AbstractEventLoop,
    served: ServedApis,
) -> list[Reflector]:
    """One list-and-watch per watched kind: the operator's only way in."""
    relist = config.relist_seconds
    jobs = f"/apis/{GROUP}/{VERSION}"
    no_queues = "no ParallelJobQueues (their CRD is not installed): a job that names a queue waits (QueueNotFound)"
    found = [
        _reflector(
            kube,
            reconciler,
            "pod",
            Watched("/api/v1/pods", relist_seconds=relist),
            on_state=lambda up: health.watch_up() if up else health.watch_down(loop.time()),
        ),
        _reflector(kube, reconciler, "node", Watched("/api/v1/nodes", relist_seconds=relist)),
        _reflector(
            kube,
            reconciler,
            "queue",
            Watched(f"{jobs}/{QUEUE_PLURAL}", optional=True, relist_seconds=relist, unavailable=no_queues),
        ),
    ]
    if config.namespaces:
        found += [
            _reflector(kube, reconciler, "job", Watched(f"{jobs}/namespaces/{ns}/{PLURAL}", relist_seconds=relist), ns)
            for ns in config.namespaces
        ]
    else:
        found.append(_reflector(kube, reconciler, "job", Watched(f"{jobs}/{PLURAL}", relist_seconds=relist)))
    # Kubernetes' own gang API: PodGroups (our placement for pods that name one and ask for us; their status)
    # and Workloads (the shape a Job controller's Workload declares). Served as scheduling.k8s.io/v1alpha2 by
    # 1.36 with the GenericWorkload gate and that API version on; a cluster without it has no such groups.
    gang_off = "pods of a Kubernetes PodGroup (scheduling.k8s.io) are not placed (docs/pod-groups.md)"
    found += [
        _reflector(kube, reconciler, kind, Watched(path, optional=True, relist_seconds=relist, unavailable=gang_off))
        for kind, path in (
            ("podgroup", pod_groups_path(served.gang_version)),
            ("workload", workloads_path(served.gang_version)),
        )
    ]
    # CompositePodGroups (beta in 1.38, where the gang API version serves them with the CompositePodGroup gate):
    # a root and its child PodGroups are placed as one gang (plan/groups/composites.py). Elsewhere: none.
    no_composites = "CompositePodGroups are not served: a PodGroup naming one as its parent is not placed"
    composites = Watched(
        composite_groups_path(served.gang_version), optional=True, relist_seconds=relist, unavailable=no_composites
    )
    found.append(_reflector(kube, reconciler, "compositepodgroup", composites))
    # Our ComputeDomains (NVL72 trays, docs/nvl72.md): a cluster without the driver's CRD has none.
    no_domains = "no ComputeDomains: a tray job's unused ones are left to the garbage collector"
    ours = {"labelSelector": f"{MANAGED_LABEL}={MANAGED_VALUE}"}
    domains = Watched(DOMAINS_PATH, query=ours, optional=True, unavailable=no_domains, relist_seconds=relist)
    found.append(_reflector(kube, reconciler, "computedomain", domains))
    if config.dra.enabled:
        # ResourceSlices (GPUs of DRA nodes) and ResourceClaims (devices others hold). A cluster before
        # 1.34 (no resource.k8s.io/v1) or a role without the verbs: every node is a device-plugin node.
        no_dra = "no DRA: every node is a device-plugin node (docs/dra.md)"
        found += [
            _reflector(kube, reconciler, kind, Watched(path, optional=True, relist_seconds=relist, unavailable=no_dra))
            for kind, path in (("resourceslice", SLICES_PATH), ("resourceclaim", CLAIMS_PATH))
        ]
        # DeviceTaintRules (v1 from 1.37; v1beta2 behind the DRADeviceTaintRules gate in 1.36): a cluster
        # without them, or a role without the verbs, leaves device taints to the ResourceSlices.
        without = "device taints are read from the ResourceSlices alone"
        rules = Watched(served.taint_rules_path, optional=True, unavailable=without, relist_seconds=relist)
        found.append(_reflector(kube, reconciler, "devicetaintrule", rules))
    return found


def _on_signals(loop: asyncio.AbstractEventLoop, stop_flag: asyncio.Event) -> list[int]:
    """SIGTERM/SIGINT stop the operator cleanly (lease released); only the main thread can take them."""
    taken: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop_flag.set)
            taken.append(signum)
        except (RuntimeError, ValueError):  # not the main thread (an operator run inside a test)
            break
    return taken


async def _supervise(
    supervised: dict[asyncio.Task[Any], bool], stop_flag: asyncio.Event, health: Health, failure: list[str]
) -> None:
    """Wait for the stop flag; the first supervised task that ends while it should not sets it."""
    stopping = asyncio.create_task(stop_flag.wait(), name="stop-flag")
    pending: set[asyncio.Task[Any]] = {stopping, *supervised}
    try:
        while not stop_flag.is_set():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is stopping:
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
    finally:
        stopping.cancel()


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

"""Prometheus metrics and the health endpoint: ``/metrics`` and ``/healthz`` on one small aiohttp server.

Each operator instance has its own registry (several can run in one test process); names follow SPEC
section 4.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from paralleljob.k8s.plan.metrics_model import Gauges
from paralleljob.shellkit.http import serve_metrics

FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class BeforeRead(Collector):
    """Callbacks run whenever the registry is read (a scrape's render, a test's ``get_sample_value``), before
    any metric is: registered first, it is collected first. It yields no metric of its own."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def collect(self) -> Iterable[Metric]:
        for callback in self.callbacks:
            callback()
        return ()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # Gauges worked out from a pass are set here, when read, not by every pass (observe/reporting.py)
        self.before_read = BeforeRead()
        r.register(self.before_read)
        self.jobs = Gauge("paralleljob_jobs", "ParallelJobs by phase", ["phase"], registry=r)
        self.scheduling = Histogram(
            "paralleljob_scheduling_duration_seconds",
            "Time to decide one job's placement",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.bind = Histogram(
            "paralleljob_bind_duration_seconds",
            "Time from a placement being recorded to its whole gang bound",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.cost = Gauge(
            "paralleljob_placement_cost_ms",
            "Estimated communication time per step, summed over placed jobs",
            ["term"],
            registry=r,
        )
        self.gpus = Gauge("paralleljob_gpus", "GPUs by state", ["state"], registry=r)
        self.failures = Counter(
            "paralleljob_failures_total", "Failures handled, by the action taken", ["action"], registry=r
        )
        self.recovery = Histogram(
            "paralleljob_recovery_duration_seconds",
            "Time from a failure being seen to the repaired gang bound",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.queue_length = Gauge("paralleljob_queue_length", "Jobs waiting, by queue", ["queue"], registry=r)
        self.fragmentation = Gauge(
            "paralleljob_fragmentation_ratio", "Share of free GPUs stranded on partly used nodes", registry=r
        )
        self.sliced_gpus = Gauge(
            "paralleljob_sliced_gpus",
            "GPUs that MIG slices hold, never offered whole (DRA: each GPU with a slice, allocated in"
            " paralleljob_gpus; device plugin: every MIG-mode GPU of a node where a job holds a slice)",
            registry=r,
        )
        self.mig_slices = Gauge(
            "paralleljob_mig_slices",
            "MIG slices the operator's jobs hold (spec.gpuSharing), by profile",
            ["profile"],
            registry=r,
        )
        self.mps_gpus = Gauge(
            "paralleljob_mps_gpus", "GPUs that MPS shares hold, never offered whole (spec.gpuSharing.mps)", registry=r
        )
        self.mps_shares = Gauge(
            "paralleljob_mps_shares",
            "MPS shares the operator's jobs hold (spec.gpuSharing.mps), by percent of a GPU",
            ["percent"],
            registry=r,
        )
        self.fairness = Gauge(
            "paralleljob_fairness_jain", "Jain's index of weighted GPU shares across queues", registry=r
        )
        self.leader = Gauge("paralleljob_leader", "1 while this instance holds the leader lease", registry=r)
        self.healthy = Gauge(
            "paralleljob_healthy",
            "1 while /healthz says healthy (read at each scrape), 0 while it says why not",
            registry=r,
        )
        self.passes = Counter("paralleljob_reconcile_passes_total", "Reconcile passes run", registry=r)
        self.waiting_left_out = Gauge(
            "paralleljob_pass_waiting_left_out",
            "Queued jobs the last pass left out: their queue line had nothing that could admit them (strict FIFO)",
            registry=r,
        )
        self.status_writes_held_back = Gauge(
            "paralleljob_status_writes_held_back",
            "Waiting jobs' status writes the last pass did not start: background_chains were already in flight",
            registry=r,
        )
        self.api_requests_waiting = Gauge(
            "paralleljob_api_requests_waiting",
            "API requests waiting for one of the client's slots at the last pass, by lane: urgent (placements,"
            " pods, binds, finishing writes) go before background (waiting jobs' status)",
            ["lane"],
            registry=r,
        )
        self.repair_chains = Counter(
            "paralleljob_repair_chains_total",
            "Chains that put pods back into a running gang (a repair, a growth); while one runs, the other chains"
            " keep at most an eighth of the client's request slots in flight",
            registry=r,
        )
        self.list_duration = Histogram(
            "paralleljob_list_duration_seconds",
            "One full list of a watched kind (every page, merged into its store); its watch waits meanwhile",
            ["kind"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
            registry=r,
        )
        self.pass_duration = Histogram(
            "paralleljob_reconcile_pass_duration_seconds",
            "One reconcile pass: snapshot, decisions for every job, plan handed to the executor (not its writes)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.binds = Counter("paralleljob_binds_total", "Pods bound", registry=r)
        self.reoptimizable = Gauge(
            "paralleljob_reoptimizable_jobs",
            "Repaired jobs whose cheaper placement now is worth moving to (condition Reoptimizable=True)",
            registry=r,
        )
        self.migrations = Counter(
            "paralleljob_migrations_total", "Jobs moved to a cheaper placement at a checkpoint boundary", registry=r
        )
        self.room_moves = Counter(
            "paralleljob_room_moves_total",
            "Jobs moved (at once or at their checkpoint) to free a domain (NVLink clique, HGX node or leaf)"
            " for a waiting job",
            registry=r,
        )
        self.room_move_lost = Counter(
            "paralleljob_room_move_lost_gpu_seconds_total",
            "Work thrown away by those moves: GPUs x seconds since each moved job's last checkpoint",
            registry=r,
        )
        self.room_wait = Histogram(
            "paralleljob_room_move_wait_seconds",
            "Jobs admitted into room that moves freed: their wait since queued (status.queuedAt) and since"
            " their move plan was made",
            ["since"],
            buckets=(1, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 21600, 86400),
            registry=r,
        )
        self.lease_renewals = Counter(
            "paralleljob_lease_renewals_total",
            "The leader's attempts to renew its Lease, by outcome (renewed, conflict, failed, timeout)",
            ["outcome"],
            registry=r,
        )
        self.gc_full = Histogram(
            "paralleljob_gc_full_collection_seconds",
            "Pauses of the operator's scheduled garbage collections: of what was allocated since the last one"
            " (recent) or of the whole heap (whole), runtime/memory/gctuning.py",
            ["scope"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.heap_released = Counter(
            "paralleljob_heap_released_bytes_total",
            "Resident memory the operator's C heap gave back to the system (malloc_trim every 10 s,"
            " runtime/memory/memtrim.py)",
            registry=r,
        )
        self.lease_renew = Histogram(
            "paralleljob_lease_renew_seconds",
            "How long the leader's Lease renewals take (the API server's answer, on the election's own thread)",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=r,
        )
        self.oversubscribed_nodes = Gauge(
            "paralleljob_oversubscribed_nodes",
            "Nodes whose pods hold more GPUs than the node has free (pods the operator did not place)",
            registry=r,
        )
        self.dropped_status_fields = Counter(
            "paralleljob_status_fields_dropped_total",
            "Status fields the API server did not keep (the installed CRD lacks them: update the CRDs)",
            ["field"],
            registry=r,
        )
        self.view_rebuilds = Counter(
            "paralleljob_view_rebuilds_total",
            "Cluster view built from scratch instead of patched, by why (start, relist, topology, conflict, ...)",
            ["reason"],
            registry=r,
        )
        self.view_mismatches = Counter(
            "paralleljob_view_rebuild_mismatches_total",
            "Self-checks that found the kept cluster view different from a rebuild (then adopted); a bug if not 0",
            registry=r,
        )
        self.domains = Gauge(
            "paralleljob_domains",
            "Topology domains (node, rack, spine...) by how much is free for new work: empty, partial, full",
            ["level", "state"],
            registry=r,
        )
        self.level_fragmentation = Gauge(
            "paralleljob_level_fragmentation_ratio",
            "Share of free GPUs that sit in partly used domains of a topology level",
            ["level"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "paralleljob_queue_wait_seconds",
            "Time a job waited before admission (placement recorded), from its status.queuedAt (to the second)",
            ["queue"],
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
            registry=r,
        )
        self.queue_oldest = Gauge(
            "paralleljob_queue_oldest_queued_timestamp_seconds",
            "status.queuedAt of a queue's longest-waiting job, epoch seconds (no series: none waits);"
            " time() minus it is that job's wait",
            ["queue"],
            registry=r,
        )
        self.api_requests = Counter(
            "paralleljob_api_requests_total",
            "Requests to the API server by verb, resource and HTTP code ('<error>': no answer)",
            ["verb", "resource", "code"],
            registry=r,
        )
        self._queues: set[str] = set()
        self._waiting_queues: set[str] = set()
        self._profiles: set[str] = set()  # MIG profiles with a paralleljob_mig_slices series
        self._percents: set[str] = set()  # MPS share sizes with a paralleljob_mps_shares series
        self._last: dict[tuple[int, tuple[str, ...]], float] = {}  # (gauge, labels) -> the value last set

    def _set(self, gauge: Gauge, value: float, *labels: str) -> None:
        """Set one labelled series, skipping the label look-up when it already reads ``value`` (a pass sets
        a series per queue; with a thousand queues the look-ups were most of what the gauges cost)."""
        key = (id(gauge), labels)
        if self._last.get(key) != value:
            gauge.labels(*labels).set(value)
            self._last[key] = value

    def update(self, g: Gauges) -> None:
        for phase, count in g.jobs.items():
            self._set(self.jobs, count, phase)
        for state, count in g.gpus.items():
            self._set(self.gpus, count, state)
        for term, value in g.cost_ms.items():
            self._set(self.cost, value, term)
        for queue in self._queues - g.queue_length.keys():
            # Neither a ParallelJobQueue nor any job names it any more (a typo'd spec.queue, deleted): its
            # series goes, not a 0 kept for good. A queue object with no job waiting reads 0 (it is listed).
            self.queue_length.remove(queue)
            self._last.pop((id(self.queue_length), (queue,)), None)
        for queue, length in g.queue_length.items():
            self._set(self.queue_length, length, queue)
            if queue not in self._queues:
                self.queue_wait.labels(queue=queue)  # the series exists from 0, so a rate sees its first admission
        self._queues = set(g.queue_length)
        self.fragmentation.set(g.fragmentation)
        self.sliced_gpus.set(g.sliced_gpus)
        for profile in self._profiles - g.mig_slices.keys():
            self.mig_slices.labels(profile=profile).set(0)  # none held now; the series stays, read 0
        for profile, count in g.mig_slices.items():
            self.mig_slices.labels(profile=profile).set(count)
        self._profiles |= set(g.mig_slices)
        self.mps_gpus.set(g.mps_gpus)
        for percent in self._percents - g.mps_shares.keys():
            self.mps_shares.labels(percent=percent).set(0)
        for percent, count in g.mps_shares.items():
            self.mps_shares.labels(percent=percent).set(count)
        self._percents |= set(g.mps_shares)
        self.fairness.set(g.fairness)
        self.reoptimizable.set(g.reoptimizable)
        for use in g.levels:
            for state, count in (("empty", use.empty), ("partial", use.partial), ("full", use.full)):
                self._set(self.domains, count, use.level, state)
            self._set(self.level_fragmentation, use.fragmentation, use.level)

    def set_oldest_queued(self, oldest: dict[str, float]) -> None:
        for queue in self._waiting_queues - oldest.keys():
            self.queue_oldest.remove(queue)  # nobody waits there now: no age to show
            self._last.pop((id(self.queue_oldest), (queue,)), None)
        for queue, stamp in oldest.items():
            self._set(self.queue_oldest, stamp, queue)
        self._waiting_queues = set(oldest)

    def observe_gc(self, scope: str, seconds: float) -> None:
        self.gc_full.labels(scope=scope).observe(seconds)

    def observe_request(self, method: str, path: str, code: int) -> None:
        verb, resource = request_kind(method, path)
        self.api_requests.labels(verb=verb, resource=resource, code=str(code) if code > 0 else "<error>").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe_renewal(self, outcome: str, seconds: float) -> None:
        """Called from the election's thread (prometheus_client's metrics are thread-safe)."""
        self.lease_renewals.labels(outcome=outcome).inc()
        self.lease_renew.observe(seconds)


def request_kind(method: str, path: str) -> tuple[str, str]:
    """(Kubernetes verb, resource[/subresource]) of a request path, as the API server's audit log names
    them: ``GET /api/v1/namespaces/ns/pods`` is (list, pods), ``POST .../pods/p/binding`` (create, pods/binding)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = "/".join(rest[:1] + rest[2:3]) or "unknown"
    named = len(rest) >= 2
    verbs = {
        "WATCH": "watch",
        "GET": "get" if named else "list",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }
    return verbs.get(method.upper(), method.lower()), resource


async def serve(metrics: Metrics, host: str, port: int, health: Callable[[], tuple[bool, str]]) -> web.AppRunner:
    """/metrics, and /healthz answering ``health()`` (503 while it says unhealthy). Each scrape also reads the
    verdict into ``paralleljob_healthy``, so an alert sees what a liveness probe sees."""

    def render() -> bytes:
        metrics.healthy.set(1.0 if health()[0] else 0.0)
        return metrics.render()

    return await serve_metrics(render, health, host, port)

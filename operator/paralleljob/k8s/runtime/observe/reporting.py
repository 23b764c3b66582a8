"""What the loop tells the world about its passes besides the jobs' own writes: a log line when a warning
appears, Events about nodes, the Prometheus gauges and histograms (queue waits, bind and recovery times),
and the ParallelJobQueue statuses, written in the background.

The reconciler owns one :class:`PassReport` and hands it each pass's plan and each finished chain's
outcome; nothing here decides anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from paralleljob.core.failure.repair import FailureAction
from paralleljob.k8s.edge.constants import GROUP, QUEUE_PLURAL, VERSION
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.plan.actions import Plan
from paralleljob.k8s.plan.metrics_model import gauges, queue_waits, room_waits
from paralleljob.k8s.runtime.api import ApiError, Kube
from paralleljob.k8s.runtime.executor import Outcome
from paralleljob.k8s.runtime.lanes import Lanes
from paralleljob.k8s.runtime.observe.events import EventPoster
from paralleljob.k8s.runtime.observe.metrics import Metrics
from paralleljob.k8s.view.clusterview import ClusterView
from paralleljob.k8s.view.store import ObjectStore

log = logging.getLogger("paralleljob.k8s")


class PassReport:
    """The loop's reports, and the little they remember between passes: the warnings already logged, the
    queue-status write in flight, and when each job was placed or failed (for the bind and recovery
    times)."""

    def __init__(
        self,
        kube: Kube,
        metrics: Metrics,
        events: EventPoster,
        nodes: ObjectStore[NodeInfo],
        queues: ObjectStore[QueueInfo],
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.events = events
        self.nodes = nodes
        self.queues = queues
        self.reported_warnings: set[str] = set()  # the previous pass's warnings (logged when they appeared)
        self.queue_writes: asyncio.Task[None] | None = None
        self.placed_at: dict[str, float] = {}
        self.failed_at: dict[str, float] = {}
        self.repair_chains_counted = 0
        # the newest pass's inputs to its gauges, until the registry is read (set_gauges)
        self.newest: tuple[Plan, ClusterView, Mapping[str, QueueInfo], int, object] | None = None
        metrics.before_read.callbacks.append(self.set_gauges)

    def warnings(self, plan: Plan, view: ClusterView) -> None:
        """Log a warning when it appears, not on every pass while it lasts (a condition that held for a
        second was logged 187 times); a node the view finds oversubscribed also gets a Warning Event (the
        poster aggregates repeats) and counts in ``paralleljob_oversubscribed_nodes``."""
        current = set(plan.warnings)
        for warning in plan.warnings:
            if warning not in self.reported_warnings:
                log.warning("%s", warning)
        for node, found in view.node_warnings.items():
            body = self.nodes.body("", node)
            for warning in found:
                if warning not in self.reported_warnings and body is not None:
                    self.events.about_node(body, "Warning", "GPUsOversubscribed", warning)
        self.reported_warnings = current
        self.metrics.oversubscribed_nodes.set(len(view.node_warnings))

    def node_events(self, plan: Plan) -> None:
        for note in plan.node_events:
            body = self.nodes.body("", note.node)
            if body is not None:
                self.events.about_node(body, note.event_type, note.reason, note.message)

    def figures(
        self, plan: Plan, view: ClusterView, queues: Mapping[str, QueueInfo], held_back: int, lanes: object
    ) -> None:
        """Count the pass, and keep what its gauges are worked out from until the registry is next read: a
        wave of pods runs a pass every few milliseconds, and working out jobs by phase and queue and the GPUs
        by level on each of them took a twentieth of the operator's samples (py-spy) and 3 ms of a pass at
        10,000 jobs, for numbers read every 15-30 s."""
        self.metrics.passes.inc()
        self.newest = (plan, view, queues, held_back, lanes)

    def set_gauges(self) -> None:
        """The newest pass's gauges: jobs by phase and queue, fairness, the waiting jobs left out, the status
        writes held back and, when the client has lanes, the requests waiting in each now. Runs on the loop
        (the scrape is served there), between passes."""
        if self.newest is None:
            return
        plan, view, queues, held_back, lanes = self.newest
        self.newest = None  # a second read before the next pass finds them set
        # plan.seen(), not plan.jobs: a job whose chain is in flight is left out of the decisions, not the counts
        self.metrics.update(
            gauges(
                view,
                plan.seen(),
                queues,
                plan.fairness,
                plan.quiet_waiting,
                plan.queue_book,
                plan.quiet_finished,
                plan.skipped_pending,
            )
        )
        self.metrics.waiting_left_out.set(sum(plan.quiet_waiting.values()))
        self.metrics.status_writes_held_back.set(held_back)
        if isinstance(lanes, Lanes):
            self.lane_figures(lanes)

    def lane_figures(self, lanes: Lanes) -> None:
        """The requests waiting in each lane now, and the repair chains begun since the last pass."""
        urgent, background = lanes.waiting()
        self.metrics.api_requests_waiting.labels("urgent").set(urgent)
        self.metrics.api_requests_waiting.labels("background").set(background)
        self.metrics.repair_chains.inc(lanes.repairs_begun - self.repair_chains_counted)
        self.repair_chains_counted = lanes.repairs_begun

    def queue_waits(self, plan: Plan) -> None:
        now = time.time()
        admitted, oldest = queue_waits(plan.seen(), now, plan.quiet_oldest)
        for queue, seconds in admitted:
            self.metrics.queue_wait.labels(queue=queue).observe(seconds)
        for since, seconds in room_waits(plan.seen(), now):
            self.metrics.room_wait.labels(since=since).observe(seconds)
        self.metrics.set_oldest_queued(oldest)

    def queue_status(self, plan: Plan) -> None:
        """Write the queue statuses the pass found out of date (in the background; it is informational)."""
        if self.queue_writes is not None and not self.queue_writes.done():
            return  # the previous update is still going; the next pass looks again
        if plan.queue_statuses:
            changes = list(plan.queue_statuses.items())
            self.queue_writes = asyncio.create_task(self._write_queue_statuses(changes), name="queue-status")

    async def _write_queue_statuses(self, changes: list[tuple[str, dict[str, float]]]) -> None:
        for name, status in changes:
            path = f"/apis/{GROUP}/{VERSION}/{QUEUE_PLURAL}/{name}/status"
            try:
                self.queues.upsert(await self.kube.merge_patch(path, {"status": status}))
            except ApiError as exc:
                log.debug("status of queue %s not written: %s", name, exc)

    def chain(self, outcome: Outcome, started: float) -> None:
        """A finished chain's binds, dropped status fields and written decisions, timed from the pass that
        ``started`` it: bind and recovery times, migrations and failures by action."""
        self.metrics.binds.inc(outcome.bound)
        for path in outcome.dropped:
            self.metrics.dropped_status_fields.labels(field=path).inc()
        for actions in outcome.written:
            key = actions.job.key
            if actions.placed_cost is not None:
                self.placed_at[key] = started
            if actions.recovery_started and key not in self.failed_at:
                self.failed_at[key] = started
            if actions.room_moved_gpu_s is not None:  # a move that freed room, not one back to a cheaper placement
                self.metrics.room_moves.inc()
                self.metrics.room_move_lost.inc(actions.room_moved_gpu_s)
            elif actions.migrated:
                self.metrics.migrations.inc()
            if actions.failure_action is not None:
                self.metrics.failures.labels(action=actions.failure_action.value).inc()
                if actions.failure_action is not FailureAction.RESCHEDULED:
                    self.failed_at.pop(key, None)
            if actions.gang_bound and key in self.placed_at:
                self.metrics.bind.observe(time.monotonic() - self.placed_at.pop(key))
            if actions.recovery_done and key in self.failed_at:
                self.metrics.recovery.observe(time.monotonic() - self.failed_at.pop(key))

"""A tiny in-memory "API server" for the pure decisions: it applies a Plan the way the executor would
(status first, then deletes, creates, binds), so tests can run passes until the cluster settles.

A test may hold some jobs' writes *in flight* (``step(hold=...)``): as in the reconciler, whose chains run as
tasks, those jobs are ``busy`` in the following passes until ``land`` applies what was decided for them; a
held write that gives a job's GPUs up (finished, failed, requeued) makes it ``releasing`` meanwhile, as the
reconciler's does, so its recorded placement no longer claims GPUs the pass gave to others."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from paralleljob.clitools.drain import plan as drain_plan
from paralleljob.core.admit.queueing import QueuePolicy
from paralleljob.k8s.edge.config import TopologyConfig
from paralleljob.k8s.edge.parse.compositegroups import parse_composite_group
from paralleljob.k8s.edge.parse.dra import parse_claim
from paralleljob.k8s.edge.parse.nativegroups import parse_pod_group, parse_workload
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import JobObject, parse_job
from paralleljob.k8s.edge.render.computedomain import parse_domain
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from paralleljob.k8s.plan.actions import ACTIVE, JobActions, Plan
from paralleljob.k8s.plan.admission.waiting import WaitingMemo
from paralleljob.k8s.plan.decide import Observed, claims_of, decide
from paralleljob.k8s.plan.failure.backoff import Backoff
from paralleljob.k8s.plan.groups.composites import fold_composites
from paralleljob.k8s.plan.nodenotes import NodeEvent
from paralleljob.k8s.plan.status import wait_message_changed
from paralleljob.k8s.view.clusterview import ClusterView, build_view
from tests.k8s.factories import pod_from_manifest

START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


class FakeCluster:
    def __init__(
        self,
        nodes: list[dict[str, Any]],
        config: TopologyConfig | None = None,
        policy: QueuePolicy | None = None,
        queues: dict[str, QueueInfo] | None = None,
        namespaces: tuple[str, ...] = (),
        memo: bool = False,
    ) -> None:
        """``memo``: keep a WaitingMemo between passes as the reconciler does, so strict FIFO leaves quiet lines
        out; job bodies are then parsed again only when replaced (as the reconciler's store does), so a test
        must replace a body to change it, never edit it in place, and nodes count as changed only when their
        body is replaced."""
        self.memo = WaitingMemo() if memo else None
        # as OperatorConfig.waiting_message_refresh_s (0 here: every changed wait is written, as before it)
        self.message_refresh_s = 0.0
        self.message_written: dict[str, float] = {}
        self.repriced_at: dict[tuple[str, int], float] = {}  # as the reconciler keeps it: last re-prices
        self.now_s = 0.0  # the last step's time, epoch seconds
        self._parsed: dict[str, tuple[dict[str, Any], JobObject]] = {}
        self._parsed_pods: dict[tuple[str, str], tuple[dict[str, Any], PodInfo]] = {}
        self._node_bodies: dict[str, dict[str, Any]] = {}
        self.config = config or TopologyConfig()
        self.namespaces = namespaces
        self.policy = policy
        self.queues = queues or {}
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.binds: list[tuple[str, str]] = []
        self.bind_failures: dict[str, str] = {}
        self.invalid_pods: dict[str, str] = {}
        self.api_trouble: dict[str, str] = {}
        # What the reconciler carries from one pass to the next, carried the same way here.
        self.backoff = Backoff()
        self.node_warnings: dict[str, tuple[str, ...]] = {}
        self.node_events: list[NodeEvent] = []
        # job key -> placement, for jobs a test declares busy outright (as if a chain of theirs were running)
        self.held_busy: dict[str, PlacementRecord | None] = {}
        self.seconds = 0  # the cluster's clock: each step() without ``now`` is one second later
        self.events: list[tuple[str, str, str]] = []
        self.last_plan: Plan | None = None
        self.last_view: ClusterView | None = None
        self.inflight: dict[str, JobActions] = {}  # job key -> decisions not carried out yet (``step(hold=)``)
        self.releasing: set[str] = set()  # held jobs whose write gives their GPUs up (the reconciler's set)
        # Kubernetes' gang API objects (scheduling.k8s.io PodGroups and Workloads) by namespace/name, as bodies
        self.pod_groups: dict[str, dict[str, Any]] = {}
        self.workloads: dict[str, dict[str, Any]] = {}
        self.composite_groups: dict[str, dict[str, Any]] = {}  # CompositePodGroups, folded as the reconciler does
        self.resource_claims: dict[str, dict[str, Any]] = {}  # ResourceClaims by namespace/name, as bodies
        self.compute_domains: dict[tuple[str, str], dict[str, Any]] = {}  # ComputeDomains made, as bodies
        # Observed.background_room of every pass: how many status-only chains the runtime could start (None: any)
        self.room: int | None = None

    def add_job(self, body: dict[str, Any]) -> None:
        self.jobs[f"{body['metadata']['namespace']}/{body['metadata']['name']}"] = body

    def job(self, key: str) -> dict[str, Any]:
        return self.jobs[key]

    def job_pods(self, key: str) -> list[dict[str, Any]]:
        ns, name = key.split("/")
        return [
            p
            for (pns, _), p in sorted(self.pods.items())
            if pns == ns and p["metadata"].get("labels", {}).get("paralleljob.dev/job") == name
        ]

    def busy(self) -> dict[str, PlacementRecord | None]:
        """What the reconciler hands ``decide`` for chains still running: the placement being written, if any."""
        out: dict[str, PlacementRecord | None] = dict(self.held_busy)
        for key, actions in self.inflight.items():
            writing = actions.draft.phase in ACTIVE and actions.writes_status
            out[key] = record_from_status(actions.draft.data) if writing else None
        return out

    def land(self, key: str | None = None) -> None:
        """Carry out the held decisions of ``key`` (None: of every job): its chain finishes."""
        for k in [key] if key is not None else list(self.inflight):
            actions = self.inflight.pop(k, None)
            self.releasing.discard(k)
            if actions is not None:
                self._apply(actions)

    def step(self, now: str | None = None, hold: frozenset[str] | set[str] = frozenset()) -> Plan:
        if now is None:
            self.seconds += 1
            now = (START + dt.timedelta(seconds=self.seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        nodes = [parse_node(n, self.config) for n in self.nodes.values()]
        changed = {n.name: n for n in nodes}  # without a memo the harness looks at every node every pass
        if self.memo is not None:
            changed = {n.name: n for n in nodes if self._node_bodies.get(n.name) is not self.nodes[n.name]}
            changed.update({name: None for name in self._node_bodies if name not in self.nodes})  # type: ignore[misc]
            self._node_bodies = dict(self.nodes)
        workloads = {k: parse_workload(b) for k, b in self.workloads.items()}
        pods, pod_groups = fold_composites(
            [self._pod(key, body) for key, body in self.pods.items()],
            [parse_pod_group(b) for b in self.pod_groups.values()],
            [parse_composite_group(b) for b in self.composite_groups.values()],
            workloads,
        )
        observed = Observed(
            jobs=[self._job(key, body) for key, body in self.jobs.items()],
            pods=pods,
            nodes=nodes,
            now=now,
            queues=self.queues,
            bind_failures=dict(self.bind_failures),
            invalid_pods=dict(self.invalid_pods),
            api_trouble=dict(self.api_trouble),
            backoff=self.backoff,
            namespaces=self.namespaces,
            changed_nodes=changed,
            node_warnings=self.node_warnings,
            busy=self.busy(),
            pod_groups=pod_groups,
            workloads=workloads,
            resource_claims={k: parse_claim(b) for k, b in self.resource_claims.items()},
            background_room=self.room,
            message_written=dict(self.message_written),
            repriced_at=dict(self.repriced_at),
            message_refresh_s=self.message_refresh_s,
            compute_domains=[parse_domain(b) for b in self.compute_domains.values()],
        )
        self.bind_failures.clear()
        self.invalid_pods.clear()
        self.api_trouble.clear()
        self.now_s = observed.seconds
        view = None
        if self.releasing:  # as the reconciler's kept view is refreshed with its claims
            view = build_view(nodes, pods, claims_of(observed.jobs, observed.busy, self.releasing), self.config)
        plan, view = decide(observed, self.config, policy=self.policy, memo=self.memo, view=view)
        self.last_plan, self.last_view = plan, view
        self.backoff, self.node_warnings = plan.backoff, dict(plan.node_warnings)
        self.node_events.extend(plan.node_events)
        for actions in plan.jobs:
            if actions.repriced is not None:
                self.repriced_at[(actions.job.key, actions.repriced)] = observed.seconds
            if actions.job.key in hold and actions.has_work:
                self.inflight[actions.job.key] = actions  # its chain is still running in the next passes
                if actions.gives_gpus_up:
                    self.releasing.add(actions.job.key)
            else:
                self._apply(actions)
        for d in plan.orphans:
            self.pods.pop((d.namespace, d.name), None)
        for cd in plan.domain_deletes:
            if self.compute_domains.get((cd.namespace, cd.name), {}).get("metadata", {}).get("uid") == cd.uid:
                del self.compute_domains[(cd.namespace, cd.name)]
                self.events.append((cd.job.key, "ComputeDomainDeleted", cd.why))
        return plan

    def _job(self, key: str, body: dict[str, Any]) -> JobObject:
        if self.memo is None:
            return parse_job(body)
        kept = self._parsed.get(key)
        if kept is None or kept[0] is not body:
            kept = (body, parse_job(body))
            self._parsed[key] = kept
        return kept[1]

    def _pod(self, key: tuple[str, str], body: dict[str, Any]) -> PodInfo:
        if self.memo is None:
            return parse_pod(body)
        kept = self._parsed_pods.get(key)
        if kept is None or kept[0] is not body:
            kept = (body, parse_pod(body))
            self._parsed_pods[key] = kept
        return kept[1]

    def _apply(self, actions: JobActions) -> None:
        key = actions.job.key
        if key not in self.jobs:
            return  # deleted while its chain ran: the API refuses the writes
        if actions.writes_status:
            if wait_message_changed(actions.draft):
                self.message_written[key] = self.now_s  # as the runtime stamps a write it starts
            body = copy.deepcopy(self.jobs[key])
            body["status"] = copy.deepcopy(actions.draft.data)
            self.jobs[key] = body
        self.events.extend((key, e.reason, e.message) for e in actions.events)
        for r in actions.reserves:
            claim = self.resource_claims[f"{r.namespace}/{r.name}"]
            assert r.body["metadata"]["resourceVersion"] == claim["metadata"].get("resourceVersion", "")
            claim.setdefault("status", {})["reservedFor"] = copy.deepcopy(r.body["status"]["reservedFor"])
        for a in actions.annotates:
            pod = self.pods.get((a.namespace, a.name))
            if pod is not None and pod["metadata"]["uid"] == a.uid:
                pod = self.pods[(a.namespace, a.name)] = copy.deepcopy(pod)  # a new version, as the API makes
                pod["metadata"].setdefault("annotations", {}).update(a.annotations)
        for d in actions.deletes:
            self.pods.pop((d.namespace, d.name), None)  # kwok deletes at once
        for manifest in actions.compute_domains:  # an existing one is kept (the executor's 409)
            meta = manifest["metadata"]
            if (meta["namespace"], meta["name"]) not in self.compute_domains:
                body = copy.deepcopy(manifest)
                body["metadata"]["uid"] = f"cd-{meta['name']}-{len(self.compute_domains)}-{self.seconds}"
                self.compute_domains[(meta["namespace"], meta["name"])] = body
        for c in actions.creates:
            meta = c.manifest["metadata"]
            if (meta["namespace"], meta["name"]) in self.pods:
                continue
            self.pods[(meta["namespace"], meta["name"])] = pod_from_manifest(c.manifest)
            self._bind(meta["namespace"], meta["name"], c.node)
        for b in actions.binds:
            self._bind(b.namespace, b.name, b.node)
        gone = actions.delete_job
        if gone is not None and self.jobs[key]["metadata"].get("uid") == gone.uid:  # the UID precondition
            del self.jobs[key]
            for pod in self.job_pods(key):  # the garbage collector, through the pods' ownerReferences
                self.pods.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]), None)
            for domain_key, body in list(self.compute_domains.items()):  # and the ComputeDomains' too
                if body["metadata"]["ownerReferences"][0]["uid"] == gone.uid:
                    del self.compute_domains[domain_key]

    def _bind(self, namespace: str, name: str, node: str) -> None:
        pod = self.pods.get((namespace, name))
        if pod is None:
            return  # deleted while the chain ran: the API answers 404
        assert not pod["spec"].get("nodeName"), f"double bind of {name}"
        pod = self.pods[(namespace, name)] = copy.deepcopy(pod)  # a new version, as the API makes
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        self.binds.append((name, node))

    def seconds_now(self) -> float:
        """The clock of the last ``step()`` without ``now``, in epoch seconds."""
        return (START + dt.timedelta(seconds=self.seconds)).timestamp()

    def settle(self, passes: int = 6) -> None:
        for _ in range(passes):
            self.step()

    def phase(self, key: str) -> str:
        return str(self.jobs[key].get("status", {}).get("phase"))


def merge_patch(body: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``patch`` applied to ``body`` as the API server applies a JSON merge patch."""
    out = copy.deepcopy(body)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_patch(out[key], value)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def drain_node(
    fc: FakeCluster, name: str, gpus: list[int] | None = None, *, now: bool = False, undo: bool = False
) -> None:
    """What ``paralleljob drain [--now] NODE`` / ``undrain`` writes on the node."""
    fc.nodes[name] = merge_patch(fc.nodes[name], drain_plan(fc.nodes[name], gpus, undo, now=now).patch)

"""The per-level allocation and fragmentation gauges, the queue waits and the API request labels."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.topology import Level, NodeSpec, Topology
from paralleljob.k8s.edge.parse.queues import parse_time
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.metrics_model import LevelUse, gauges, level_use, queue_waits
from paralleljob.k8s.plan.status import StatusDraft
from paralleljob.k8s.runtime.observe.metrics import Metrics, request_kind
from paralleljob.k8s.view.clusterview import ClusterView
from tests.k8s import factories


def _view(topology: Topology, state: ClusterState) -> ClusterView:
    return ClusterView(topology, state, {}, {}, [], frozenset())


def _scan(topology: Topology, state: ClusterState, level: int) -> LevelUse:
    """The same numbers read GPU by GPU, domain by domain."""
    free: dict[int, int] = {}
    size: dict[int, int] = {}
    for node in range(topology.num_nodes):
        dom = topology.domain_of[level][node]
        usable = state.usable_free(node)
        free[dom] = free.get(dom, 0) + usable
        size[dom] = size.get(dom, 0) + topology.node_gpu_count[node]
    kinds = ["empty" if free[d] == size[d] else "full" if free[d] == 0 else "partial" for d in free]
    total = sum(free.values())
    stranded = sum(f for d, f in free.items() if 0 < f < size[d])
    return LevelUse(
        topology.levels[level].name,
        kinds.count("empty"),
        kinds.count("partial"),
        kinds.count("full"),
        stranded / total if total else 0.0,
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Topology, ClusterState]:
    racks = draw(st.integers(1, 4))
    per_rack = draw(st.integers(1, 4))
    mixed = draw(st.booleans())
    nodes = []
    for n in range(racks * per_rack):
        gpus = draw(st.sampled_from([4, 8])) if mixed else 8
        memory = draw(st.sampled_from([40.0, 80.0])) if mixed else 80.0
        nodes.append(NodeSpec(f"n{n}", gpus, memory, (f"rack-{n // per_rack}", "cluster")))
    topology = Topology.from_nodes(nodes, [Level("node", 600), Level("rack", 100), Level("cluster", 50)])
    state = ClusterState(topology)
    for node in range(topology.num_nodes):
        used = draw(st.integers(0, topology.node_gpu_count[node]))
        if used:
            first = topology.node_first_gpu[node]
            state.allocate(Allocation(f"job-{node}", (tuple(range(first, first + used)),), 10.0))
        if draw(st.integers(0, 5)) == 0:
            state.set_node_schedulable(node, False)
        if used < topology.node_gpu_count[node] and draw(st.integers(0, 5)) == 0:
            state.set_health(topology.node_first_gpu[node] + used, GPUHealth.OFFLINE)
    return topology, state


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_level_use_equals_a_scan_of_every_domain(cluster: tuple[Topology, ClusterState]) -> None:
    topology, state = cluster
    assert level_use(_view(topology, state)) == tuple(_scan(topology, state, level) for level in range(2))


def test_the_gauges_carry_every_level_and_state() -> None:
    metrics = Metrics()
    topology = Topology.uniform(4, 8, levels=[("rack", 2, 100.0)])
    state = ClusterState(topology)
    state.allocate(Allocation("a", ((0, 1),), 10.0))
    metrics.update(gauges(_view(topology, state), [], {}))
    text = metrics.render().decode()
    assert 'paralleljob_domains{level="rack",state="partial"} 1.0' in text
    assert 'paralleljob_domains{level="node",state="empty"} 3.0' in text
    assert 'paralleljob_level_fragmentation_ratio{level="node"} ' + str(6 / 30) in text


def _job(name: str, phase: str, queued_at: str | None, queue: str = "default") -> JobActions:
    body = factories.paralleljob(name, 2, 1, 1, queue=queue)
    body["status"] = {"phase": phase, **({"queuedAt": queued_at} if queued_at else {})}
    body["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    job = parse_job(body)
    return JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))


def test_queue_waits_are_measured_from_the_jobs_own_queued_at() -> None:
    now = parse_time("2024-01-01T00:10:00Z")
    assert now is not None
    admitted = _job("a", "Queued", "2024-01-01T00:09:00Z")
    admitted.placed_cost = {"total": 1.0}
    waiting = _job("b", "Queued", "2024-01-01T00:05:00Z")
    newest = _job("c", "Queued", "2024-01-01T00:09:30Z")
    never_stamped = _job("d", "Pending", None, queue="big")  # from its creation
    running = _job("e", "Running", "2024-01-01T00:00:00Z")
    done, oldest = queue_waits([admitted, waiting, newest, never_stamped, running], now)
    assert done == [("default", 60.0)]
    assert {q: now - stamp for q, stamp in oldest.items()} == {"default": 300.0, "big": 600.0}
    # jobs the waiting memo left out of the pass wait as much: an older one there is the queue's oldest
    quiet = {"default": "2024-01-01T00:01:00Z", "idle": "2024-01-01T00:08:00Z"}
    _, oldest = queue_waits([waiting, never_stamped], now, quiet)
    assert {q: now - stamp for q, stamp in oldest.items()} == {"default": 540.0, "big": 600.0, "idle": 120.0}


def test_request_kind_names_verbs_and_resources_as_the_audit_log_does() -> None:
    ns = "/api/v1/namespaces/team"
    pj = "/apis/paralleljob.dev/v1alpha1/namespaces/team/paralleljobs"
    assert request_kind("GET", f"{ns}/pods") == ("list", "pods")
    assert request_kind("GET", "/api/v1/nodes") == ("list", "nodes")
    assert request_kind("GET", "/api/v1/nodes/n1") == ("get", "nodes")
    assert request_kind("POST", f"{ns}/pods") == ("create", "pods")
    assert request_kind("POST", f"{ns}/pods/p-0/binding") == ("create", "pods/binding")
    assert request_kind("PATCH", f"{pj}/j/status") == ("patch", "paralleljobs/status")
    assert request_kind("DELETE", f"{ns}/pods/p-0") == ("delete", "pods")
    assert request_kind("WATCH", f"{ns}/events") == ("watch", "events")
    assert request_kind("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l") == ("update", "leases")
    assert request_kind("GET", "/api/v1/namespaces/team") == ("get", "namespaces")
    metrics = Metrics()
    metrics.observe_request("POST", f"{ns}/pods", 409)
    metrics.observe_request("GET", "/api/v1/nodes", 0)
    text = metrics.render().decode()
    assert 'paralleljob_api_requests_total{code="409",resource="pods",verb="create"} 1.0' in text
    assert 'paralleljob_api_requests_total{code="<error>",resource="nodes",verb="list"} 1.0' in text


def test_the_queue_length_of_a_queue_nothing_names_any_more_is_removed() -> None:
    # paralleljob_queue_length{queue="nosuch"} stayed (at 0) after the only job naming it was deleted.
    metrics = Metrics()
    topology = Topology.uniform(1, 8)
    view = _view(topology, ClusterState(topology))
    metrics.update(gauges(view, [_job("lost", "Queued", "2024-01-01T00:00:00Z", queue="nosuch")], {}))
    assert 'paralleljob_queue_length{queue="nosuch"} 1.0' in metrics.render().decode()
    metrics.update(gauges(view, [], {}))  # the job is deleted
    text = metrics.render().decode()
    assert 'queue_length{queue="nosuch"}' not in text
    assert 'paralleljob_queue_length{queue="default"} 0.0' in text, "the default queue needs no object"


def test_a_passs_gauges_are_set_when_the_registry_is_read_from_the_newest_pass() -> None:
    from typing import Any, cast

    from paralleljob.k8s.plan.actions import Plan
    from paralleljob.k8s.runtime.observe.reporting import PassReport

    metrics = Metrics()
    report = PassReport(cast(Any, None), metrics, cast(Any, None), cast(Any, None), cast(Any, None))
    topology = Topology.uniform(2, 8)
    busy, idle = ClusterState(topology), ClusterState(topology)
    busy.allocate(Allocation("a", ((0, 1, 2),), 10.0))
    first = Plan(jobs=[_job("q1", "Queued", None), _job("q2", "Queued", None)])
    report.figures(first, _view(topology, busy), {}, 3, None)
    assert report.newest is not None  # kept, not yet worked out
    assert metrics.registry.get_sample_value("paralleljob_gpus", {"state": "free"}) == 13.0
    assert metrics.registry.get_sample_value("paralleljob_jobs", {"phase": "Queued"}) == 2.0
    assert metrics.registry.get_sample_value("paralleljob_status_writes_held_back") == 3.0
    assert report.newest is None
    # two passes before the next read: the newest one's figures, every pass counted
    report.figures(first, _view(topology, busy), {}, 3, None)
    report.figures(Plan(busy=[_job("r", "Running", None)]), _view(topology, idle), {}, 0, None)
    text = metrics.render().decode()
    assert 'paralleljob_gpus{state="free"} 16.0' in text and 'paralleljob_jobs{phase="Queued"} 0.0' in text
    assert 'paralleljob_jobs{phase="Running"} 1.0' in text and "paralleljob_status_writes_held_back 0.0" in text
    assert metrics.registry.get_sample_value("paralleljob_reconcile_passes_total") == 3.0

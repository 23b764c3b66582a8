"""Moves that free an NVLink clique, on the real API (issue 40, item 5): one-tray jobs spread over both racks
leave 9 + 11 trays free (2 of each clique's held as warm spares: 7 + 9 usable), enough for a TP8 x DP8 job
(16 trays) in all but not for its eight two-tray TP groups (3 + 4). The operator plans moves
(``core.moves.plan_moves``), moves one-tray jobs out of the way (at once: each has run a few minutes, far
under the lost-work bound), holds the trays the plan priced, and admits the large job there: every one-tray
job runs elsewhere, each moved one saying for whom and what it lost. Without the moves (its queue's
``spec.moves.perHour: 0``) the large job waits (``Unschedulable``, the usual reason) for as long as the small
ones run, and nothing is planned or moved. A job of whole-tray pods (TP8 over two trays) is moved over trays
only, never onto a free HGX node, where its pods would be neither whole trays nor in its ComputeDomain. The
web view (headless Chromium, as ``operator_e2e/test_dashboard_browser.py``) shows a moved job's move in its
list line and its panel."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, wait_for

from paralleljob.core.moves import MoveBounds
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools import systools
from paralleljob.devtools.browser import Browser, DashboardProcess
from paralleljob.k8s.edge.constants import GROUP, QUEUE_PLURAL, VERSION
from paralleljob.k8s.edge.parse.queues import parse_queue
from paralleljob.k8s.edge.render.computedomain import CLIQUE_LABEL

pytestmark = pytest.mark.e2e

HGX_JOBS = 4  # one TP8 job per HGX node: they take those first, so the one-tray jobs go to trays
TRAYS_PER_RACK = 18
USABLE_PER_RACK = 16  # 2 warm spares per clique (the suite's nvlinkSparesPerClique)
FREE = {0: 9, 1: 11}  # trays left free per rack (spares included)


def _cliques(kube: KubeSession) -> dict[str, str]:
    nodes = kube.run(kube.core.list_node()).items
    return {n.metadata.name: n.metadata.labels[CLIQUE_LABEL] for n in nodes if CLIQUE_LABEL in n.metadata.labels}


def _nodes(status: dict[str, Any]) -> set[str]:
    return set(str(status.get("nodes") or "").split(",")) - {""}


def _scatter(
    kube: KubeSession, pjs: Jobs, free_trays: dict[int, int] = FREE, trays_each: int = 1
) -> tuple[dict[str, str], list[str]]:
    """The HGX nodes taken (jobs ``hgx0``..), then jobs of ``trays_each`` trays (TP 4 x that) on every usable
    tray, then some deleted to leave ``free_trays`` per rack; returns each tray's clique and the jobs kept."""
    clique_of = _cliques(kube)
    racks = sorted(set(clique_of.values()))
    assert len(racks) == 2 and all(sum(c == r for c in clique_of.values()) == TRAYS_PER_RACK for r in racks)
    for i in range(HGX_JOBS):
        pjs.create(f"hgx{i}", 8, 1, 1, gpuMemoryGiB=10)
    for i in range(HGX_JOBS):
        assert not set(_nodes(pjs.wait_phase(f"hgx{i}", "Running", timeout_s=120))) & set(clique_of)
    small = [f"s{i:02d}" for i in range(2 * USABLE_PER_RACK // trays_each)]
    for name in small:
        pjs.create(name, 4 * trays_each, 1, 1, gpuMemoryGiB=10, checkpoint={"intervalSeconds": 3600})
    where = {name: sorted(_nodes(pjs.wait_phase(name, "Running", timeout_s=180)))[0] for name in small}
    # leave free_trays per rack: delete that many trays' jobs of each (the spares are free already)
    gone: list[str] = []
    for rack, free in free_trays.items():
        on_rack = [n for n in small if clique_of.get(where[n]) == racks[rack]]
        assert len(on_rack) == USABLE_PER_RACK // trays_each, (rack, on_rack)
        gone += on_rack[: (free - (TRAYS_PER_RACK - USABLE_PER_RACK)) // trays_each]
    for name in gone:
        pjs.delete(name)
    kept = [n for n in small if n not in gone]
    wait_for("the deleted small jobs' pods gone", lambda: not any(pjs.pods(n) for n in gone), 120)
    return clique_of, kept


def test_one_tray_jobs_move_so_a_tp8_dp8_job_fits(nvl72_kube: KubeSession, nvl72_pjs: Jobs) -> None:
    kube, pjs = nvl72_kube, nvl72_pjs
    clique_of, kept = _scatter(kube, pjs)
    pjs.create("big", 8, 1, 8, gpuMemoryGiB=10, checkpoint={"intervalSeconds": 3600})
    status = pjs.wait_phase("big", "Running", timeout_s=300)
    big = _nodes(status)
    # 16 trays of one clique: the plan frees a clique and the job starts inside it (its DP ring on NVLink)
    assert len(big) == 16 and all(n in clique_of for n in big), status
    assert len({clique_of[n] for n in big}) == 1, {n: clique_of[n] for n in big}

    def all_running_elsewhere() -> bool:
        statuses = {n: pjs.status(n) for n in kept}
        return all(s.get("phase") == "Running" and not _nodes(s) & big for s in statuses.values())

    wait_for("every one-tray job Running off the large job's trays", all_running_elsewhere, 180)
    moved = {n: pjs.status(n) for n in kept if "lastRoomMove" in pjs.status(n)}
    assert moved, "no job was moved"
    for name, moved_status in moved.items():
        last = moved_status["lastRoomMove"]
        assert last["for"].endswith("/big"), last
        # the planner's rule, not a timing: a job moves at once only under this bound, else at its checkpoint
        # (nothing lost), however long the busy machine let it run
        assert 0 <= last["lostGpuSeconds"] <= MoveBounds().move_now_max_lost_gpu_s, last
        said = next(c for c in moved_status["conditions"] if c["type"] == "MovedForRoom")
        assert f"lost {last['lostGpuSeconds']:.0f} GPU-seconds" in said["message"], said
        pjs.wait_events(name, {"MovedForRoom"})
    pjs.wait_events("big", {"MovePlanned", "Placed"})
    assert "movePlan" not in pjs.status("big")


def _bound_nodes(pjs: Jobs, name: str) -> set[str]:
    return {p.spec.node_name for p in pjs.live_pods(name) if p.spec.node_name}


def test_two_tray_jobs_move_over_trays_never_onto_the_free_hgx_nodes(nvl72_kube: KubeSession, nvl72_pjs: Jobs) -> None:
    """A TP8 job over two trays runs as whole-tray pods in a ComputeDomain: moved onto an 8-GPU HGX node its
    pods would be neither, so the planner keeps it off the HGX nodes, free as they are (a one-tray job is an
    ordinary 4-GPU pod and may go there). First 6 + 6 usable trays free and the 4 HGX nodes empty: a TP16 x
    DP4 job (four 4-tray TP groups, which no 8-GPU node holds) gets a clique only if TP8 jobs go onto HGX
    nodes, so there is no plan: it waits and ``status.moveCheck`` says why. Then two TP8 jobs of the first
    rack end: a clique can be freed over trays alone, and a TP16 x DP4 job asked for then runs in one
    clique, every job moved for it on trays of one clique, none on an HGX node."""
    kube, pjs = nvl72_kube, nvl72_pjs
    clique_of, kept = _scatter(kube, pjs, free_trays={0: 8, 1: 8}, trays_each=2)
    hgx = [f"hgx{i}" for i in range(HGX_JOBS)]
    for name in hgx:
        pjs.delete(name)
    wait_for("the HGX jobs' pods gone", lambda: not any(pjs.pods(n) for n in hgx), 120)
    where = {name: _bound_nodes(pjs, name) for name in kept}
    assert all(len(nodes) == 2 and nodes <= set(clique_of) for nodes in where.values()), where

    pjs.create("wide", 16, 1, 4, gpuMemoryGiB=10, checkpoint={"intervalSeconds": 3600})
    wait_for(
        "the TP16 job's move check, or the job running",
        lambda: (s := pjs.status("wide")).get("moveCheck") or s.get("phase") == "Running",
        180,
    )
    status = pjs.status("wide")
    assert status.get("phase") == "Queued" and status.get("reason") == "Unschedulable", status
    assert "movePlan" not in status, status
    assert "has no placement elsewhere" in status["moveCheck"]["answer"], status["moveCheck"]
    assert not any("lastRoomMove" in pjs.status(n) for n in kept)
    assert {name: _bound_nodes(pjs, name) for name in kept} == where

    # the refused job goes (its "no" stands for ASK_EVERY_S); two TP8 jobs of the first rack end
    pjs.delete("wide")
    racks = sorted(set(clique_of.values()))
    ended = [n for n in kept if clique_of[min(where[n])] == racks[0]][:2]
    for name in ended:
        pjs.delete(name)
    left = [n for n in kept if n not in ended]
    wait_for("the ended jobs' pods gone", lambda: not any(pjs.pods(n) for n in ("wide", *ended)), 120)
    pjs.create("wide2", 16, 1, 4, gpuMemoryGiB=10, checkpoint={"intervalSeconds": 3600})
    wide = _nodes(pjs.wait_phase("wide2", "Running", timeout_s=300))
    assert len(wide) == 16 and len({clique_of.get(n) for n in wide}) == 1 and wide <= set(clique_of), wide

    def all_running_on_other_trays() -> dict[str, set[str]] | None:
        bound = {n: _bound_nodes(pjs, n) for n in left}
        settled = all(pjs.status(n).get("phase") == "Running" and len(b) == 2 for n, b in bound.items())
        return bound if settled and not any(b & wide for b in bound.values()) else None

    bound = wait_for("every TP8 job Running off the TP16 job's trays", all_running_on_other_trays, 180)
    moved = [n for n in left if "lastRoomMove" in pjs.status(n)]
    assert moved and all(bound[n] != where[n] for n in moved), (moved, where, bound)
    on_trays = {n: b for n, b in bound.items() if b <= set(clique_of) and len({clique_of[x] for x in b}) == 1}
    assert on_trays == bound, {n: b for n, b in bound.items() if n not in on_trays}


def test_the_queue_crd_checks_the_move_bounds_and_fills_their_defaults(nvl72_kube: KubeSession) -> None:
    custom = CustomObjectsApi(nvl72_kube.api)
    name = f"moves-{secrets.token_hex(3)}"

    def create(moves: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": name}}
        body["spec"] = {"moves": moves}
        return dict(nvl72_kube.run(custom.create_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, body)))

    for moves, words in (
        ({"perHour": -1}, "moves.perHour must be between 0 and 1000"),
        ({"maxExtraCostRatio": -0.5}, "moves.maxExtraCostRatio must be between 0 and 10"),
    ):
        with pytest.raises(ApiException) as refused:
            create(moves)
        assert refused.value.status == 422 and words in str(refused.value.body), refused.value.body
    created = create({"perHour": 0})
    try:
        assert created["spec"]["moves"] == {"perHour": 0, "maxExtraCostRatio": 0}, created["spec"]
        assert parse_queue(created).moves.max_moves_per_hour == 0
    finally:
        nvl72_kube.run(custom.delete_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, name))


def test_with_moves_off_the_tp8_dp8_job_waits_with_the_usual_reason(nvl72_kube: KubeSession, nvl72_pjs: Jobs) -> None:
    kube, pjs = nvl72_kube, nvl72_pjs
    custom = CustomObjectsApi(kube.api)
    queue = f"nomoves-{pjs.namespace}"[:63]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ParallelJobQueue", "metadata": {"name": queue}}
    kube.run(
        custom.create_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, {**body, "spec": {"moves": {"perHour": 0}}})
    )
    try:
        _, kept = _scatter(kube, pjs)
        pjs.create("big", 8, 1, 8, gpuMemoryGiB=10, queue=queue, checkpoint={"intervalSeconds": 3600})
        # with moves on, the pass that refuses it plans at once and says MovingJobs instead
        status = pjs.wait_phase("big", "Queued", timeout_s=120, reason="Unschedulable")
        assert "TP group" in status.get("message", ""), status
        # a later job admitted from another queue: passes ran after the refusal, and planned nothing either
        pjs.create("probe", 4, 1, 1, gpuMemoryGiB=10)
        pjs.wait_phase("probe", "Running", timeout_s=120)
        status = pjs.status("big")
        assert status.get("phase") == "Queued" and status.get("reason") == "Unschedulable", status
        assert "movePlan" not in status and "moveCheck" not in status, status
        assert not any("lastRoomMove" in pjs.status(n) for n in kept)
        assert all(pjs.status(n).get("phase") == "Running" for n in kept)
    finally:
        kube.run(custom.delete_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, queue))


def test_the_web_view_shows_whom_a_moved_job_made_room_for(
    nvl72_cluster: DevCluster, nvl72_kube: KubeSession, nvl72_pjs: Jobs, tmp_path: Path
) -> None:
    reason = systools.ensure(systools.BROWSER)
    if reason:
        pytest.skip(f"no headless Chromium: {reason}")
    kube, pjs = nvl72_kube, nvl72_pjs
    _, kept = _scatter(kube, pjs)
    pjs.create("big", 8, 1, 8, gpuMemoryGiB=10, checkpoint={"intervalSeconds": 3600})
    pjs.wait_phase("big", "Running", timeout_s=300)
    moved = [n for n in kept if "lastRoomMove" in pjs.status(n)]
    assert moved, "no job was moved"
    name = moved[0]
    last = pjs.status(name)["lastRoomMove"]
    key, big = f"{pjs.namespace}/{name}", f"{pjs.namespace}/big"
    dashboard = DashboardProcess(nvl72_cluster.kubeconfig, tmp_path / "dashboard.log")
    dashboard.start()
    browser = Browser()
    try:
        browser.open(dashboard.url)
        brief = browser.wait(
            "the moved job's list line with its move",
            f"window.pj.state && (pj.state.jobs.find(j => j.key === {key!r}) || {{}}).moves"
            f" && pj.state.jobs.find(j => j.key === {key!r}).moves.lastRoomMove",
        )
        assert brief["for"] == big and brief["lostGpuSeconds"] == last["lostGpuSeconds"], (brief, last)
        row = browser.js(f"return document.querySelector(\"tr.job[data-key='{key}']\").innerText")
        assert f"moved for {big}" in row and "GPU-s" in row, row
        browser.driver.find_element("css selector", f"tr.job[data-key='{key}']").click()
        detail = browser.wait("the moved job's panel", f"window.pj.detail && pj.detail.key === {key!r} && pj.detail")
        assert detail["moves"]["lastRoomMove"] == brief
        panel = browser.js("return document.getElementById('detail').innerText")
        assert f"last moved for room: at {last['time']} for {big}" in panel, panel
        assert browser.errors() == []
    finally:
        browser.close()
        dashboard.stop()

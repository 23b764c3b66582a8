"""The web view in a real browser (Debian's headless Chromium) against the dev cluster and the real operator:
the map shows every node, a job applied with kubectl appears with its ranks without a reload, a node taken
down turns red and the repair shows, and the job's panel has its cost, lower bound and traffic levels.

Colours are read back from the canvas' pixels, not from the page's data alone. Screenshots go to
``out/artifacts/dashboard/`` (``PARALLELJOB_ARTIFACTS`` to change it); docs/dashboard.md shows them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pjhelpers import Jobs

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.devtools import systools
from paralleljob.devtools.browser import Browser, DashboardProcess, hex_rgb

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("PARALLELJOB_ARTIFACTS", REPO / "out" / "artifacts")) / "dashboard"
FREE, FAILED, DOWN = "#cfe3cf", "#d32f2f", "#d32f2f"  # app.js's STATE.f, STATE.x and DOWN


@pytest.fixture(scope="module")
def dashboard(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashboardProcess]:
    reason = systools.ensure(systools.BROWSER)
    if reason:
        pytest.skip(f"no headless Chromium: {reason}")
    proc = DashboardProcess(dev_cluster.kubeconfig, tmp_path_factory.mktemp("dashboard") / "dashboard.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def browser(dashboard: DashboardProcess) -> Iterator[Browser]:
    window = Browser()
    try:
        yield window
    finally:
        window.close()


def kubectl_apply(cluster: DevCluster, namespace: str, body: dict[str, object]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "apply", "-f", "-"],
        input=yaml.safe_dump(body), capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr


def test_map_is_live_shows_ranks_and_a_node_going_down(
    pjs: Jobs, chaos: KubeSession, dev_cluster: DevCluster, dashboard: DashboardProcess, browser: Browser
) -> None:
    nodes = sorted(n.metadata.name for n in chaos.run(chaos.core.list_node()).items)
    browser.open(dashboard.url)
    browser.wait("every node on the map", f"window.pj.state && Object.keys(pj.state.nodes).length === {len(nodes)}")
    browser.wait("a paint", "window.pj.painted")
    assert browser.js("return pj.layout.racks.length") == 2, "the dev cluster's two racks"
    browser.js("pj.focus(arguments[0], 2.5)", nodes[0])
    assert browser.cell_colour(nodes[0], 0) == hex_rgb(FREE)
    browser.screenshot(ARTIFACTS / "dashboard-8-nodes-idle.png")

    # a job applied with kubectl: on the map with its ranks, in the page that is already open
    kubectl_apply(dev_cluster, pjs.namespace, Jobs.manifest("llm", 4, 2, 2, failurePolicy={"strategy": "minimal"}))
    status = pjs.wait_phase("llm", "Running")
    key = f"{pjs.namespace}/llm"
    slots = browser.wait(
        "the job's ranks on the map",
        f"(pj.state.jobs.find(j => j.key === {key!r} && j.slots.length === 4) || {{}}).slots",
    )
    assert sorted((s["node"], tuple(s["gpuIndices"])) for s in slots) == sorted(
        (p["node"], tuple(p["gpuIndices"])) for p in status["placement"]["pods"]
    )
    assert browser.js("return pj.snapshots") == 1, "the page was not reloaded: the job came as a patch"
    assert browser.js("return performance.getEntriesByType('navigation').length") == 1
    colour = browser.js(f"return pj.colourOf.job(pj.state.jobs.find(j => j.key === {key!r}).colour)")
    victim = slots[0]["node"]
    browser.js("pj.focus(arguments[0], 2.5)", victim)
    assert browser.cell_colour(victim, slots[0]["gpuIndices"][0]) == hex_rgb(colour)

    # clicking the job: its panel (cost against the lower bound, traffic levels) and its ranks by stage
    browser.driver.find_element("css selector", f"tr.job[data-key='{key}']").click()
    detail = browser.wait("the job's panel", "window.pj.detail && pj.detail.key === " + repr(key) + " && pj.detail")
    assert detail["lowerBoundMs"] is not None and detail["cost"]["totalMs"] >= detail["lowerBoundMs"] - 1e-6
    assert {level["level"] for level in detail["levels"]}, "a 16-GPU job on 8-GPU nodes moves bytes between nodes"
    assert len(detail["pods"]) == 4 and {p["stage"] for p in detail["pods"]} == {0, 1}
    assert "lower bound" in browser.js("return document.getElementById('detail').innerText")
    phases = browser.js("return [...document.querySelectorAll('#ranks tr')].map(r => r.cells[4].textContent)")
    assert phases == [p["pod_phase"] for p in detail["pods"]] == ["Running"] * 4, phases
    # its stages in colours of their own (not shades of one blue), named in the panel's legend
    legend = browser.js("return [...document.querySelectorAll('#ranklegend .key')].map(e => e.textContent)")
    assert legend == ["PP 0", "PP 1"]
    stage_colours = {}
    for slot in slots:
        browser.js("pj.focus(arguments[0], 2.5)", slot["node"])
        stage_colours[slot["stage"]] = browser.cell_colour(slot["node"], slot["gpuIndices"][0])
    assert stage_colours == {p: hex_rgb(browser.js("return pj.colourOf.rank(arguments[0], 2)", p)) for p in (0, 1)}
    assert stage_colours[0] != stage_colours[1]
    browser.screenshot(ARTIFACTS / "dashboard-8-nodes-job-ranks.png")

    # a node taken down: its row turns red, then the job is repaired elsewhere, still without a reload
    chaos.make_node_not_ready(victim)
    browser.wait("the node down on the map", f"pj.state.nodes[{victim!r}].ready === false")
    point = browser.js("return pj.rowOnScreen(arguments[0])", victim)
    assert browser.pixel(point[0], point[1]) == hex_rgb(DOWN)
    pjs.wait_phase("llm", "Running", restarts=1)
    browser.wait(
        "the repaired job off the failed node",
        f"pj.state.jobs.find(j => j.key === {key!r}).slots.every(s => s.node !== {victim!r})"
        f" && pj.state.jobs.find(j => j.key === {key!r}).slots.length === 4",
    )
    detail = browser.wait(
        "the repair in the job's panel",
        "pj.detail && pj.detail.restarts === 1 && pj.detail.phase === 'Running'"
        " && pj.detail.repairs.some(e => e.reason === 'Repaired') && pj.detail",
        15,
    )
    assert detail["last_failure"]["action"] == "rescheduled" and victim in detail["last_failure"]["nodes"]
    assert "rescheduled" in browser.js("return document.getElementById('detail').innerText")
    browser.screenshot(ARTIFACTS / "dashboard-8-nodes-node-down.png")
    # zoomed out, racks are bars (as at 12,500 nodes): the rack with the node down is framed in red
    browser.js("pj.focus(arguments[0], 0.3)", victim)
    assert browser.js("return pj.painted.detailed") is False
    edge = browser.js("return pj.rackEdgeOnScreen(arguments[0])", victim)
    assert browser.pixel(edge[0], edge[1]) == hex_rgb(DOWN)
    assert browser.js("return pj.snapshots") == 1
    assert browser.errors() == []

"""``paralleljob dashboard``: the read-only web view, served with aiohttp.

aiohttp because the operator already runs on it (its ``/metrics`` server, and the API client underneath
kubernetes-asyncio), it streams server-sent events with a plain ``StreamResponse``, and it is maintained by
aio-libs with releases every few weeks; a second framework (Starlette + uvicorn, FastAPI) would add three
dependencies and a second event-loop owner for four routes.

Routes: ``/`` the page and ``/static/`` its files (the front end and the vendored d3, never a CDN);
``/api/stream`` the picture, then patches, as server-sent events; ``/api/snapshot`` the picture once (for
scripts and tests); ``/api/job/{namespace}/{name}`` one job's side panel (its Events, and on a DRA cluster its
pods' ResourceClaims and their nodes' ResourceSlices, read on the click, not watched); ``/healthz``. The
server only reads: list, watch and get.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from paralleljob.clitools.describe import claim_names
from paralleljob.clitools.dralists import DRA_SLICES, dra_list
from paralleljob.dashboard.detail import job_detail
from paralleljob.dashboard.feed import Feed
from paralleljob.k8s.edge.constants import JOB_LABEL, KIND, POD_GROUP_LABEL
from paralleljob.k8s.runtime.api import ApiError

log = logging.getLogger("paralleljob.dashboard")
STATIC = Path(__file__).parent / "static"
HEARTBEAT_S = 15.0  # a comment line now and then keeps proxies (kubectl port-forward) from closing the stream

FEED: web.AppKey[Feed] = web.AppKey("feed", Feed)


def make_app(feed: Feed) -> web.Application:
    app = web.Application()
    app[FEED] = feed
    app.router.add_get("/", _index)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/api/stream", _stream)
    app.router.add_get("/api/snapshot", _snapshot)
    app.router.add_get("/api/job/{namespace}/{name}", _job)
    app.router.add_static("/static/", STATIC)
    return app


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def _healthz(request: web.Request) -> web.Response:
    feed = request.app[FEED]
    if feed.current is None:
        return web.Response(status=503, text="not synced with the API server yet\n")
    return web.Response(text=f"ok: {len(feed.current['nodes'])} nodes, last rebuild {feed.built_in_s:.3f} s\n")


async def _snapshot(request: web.Request) -> web.Response:
    feed = request.app[FEED]
    if feed.current is None:
        return web.json_response({"error": "not synced yet"}, status=503)
    return web.json_response({"seq": feed.seq, **feed.current})


async def _stream(request: web.Request) -> web.StreamResponse:
    feed = request.app[FEED]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    stream = feed.subscribe()
    try:
        while True:
            try:
                message = await asyncio.wait_for(stream.get(), HEARTBEAT_S)
            except TimeoutError:
                message = ": keep-alive\n\n"
            if message is None:
                break
            await response.write(message.encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        feed.unsubscribe(stream)
    return response


async def _job(request: web.Request) -> web.Response:
    feed = request.app[FEED]
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    body = feed.jobs.body(namespace, name)
    if body is None:
        return web.json_response({"error": f"no ParallelJob {namespace}/{name}"}, status=404)
    group = str((body.get("spec") or {}).get("podGroup") or "")
    label = f"{POD_GROUP_LABEL}={group}" if group else f"{JOB_LABEL}={name}"
    pods = [
        pod_body
        for (ns, pod), _ in feed.pods.items()
        if ns == namespace and (pod_body := feed.pods.body(ns, pod)) is not None and _matches(pod_body, label)
    ]
    events: list[dict[str, Any]] = []
    with contextlib.suppress(ApiError):
        events, _ = await feed.kube.list(
            f"/api/v1/namespaces/{namespace}/events",
            {"fieldSelector": f"involvedObject.name={name},involvedObject.kind={KIND}"},
        )
    claims, slices = await _dra_objects(feed, namespace, pods)
    detail = await asyncio.to_thread(job_detail, body, feed.view, pods, events, claims, slices)
    return web.Response(text=json.dumps(detail), content_type="application/json")


async def _dra_objects(feed: Feed, namespace: str, pods: list[Any]) -> tuple[list[Any], list[Any]]:
    """The namespace's ResourceClaims and the ResourceSlices of the nodes the job's claimed pods run on,
    read on the click as its Events are, and only for a job whose pods have claims: a device-plugin
    cluster pays nothing, and a DRA cluster lists a few nodes' slices (a field selector), not 12,500."""
    claimed = [p for p in pods if claim_names(p)]
    if not claimed:
        return [], []
    nodes = sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in claimed} - {""})
    lists = await asyncio.gather(
        dra_list(feed.kube, f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"),
        *(dra_list(feed.kube, DRA_SLICES, {"fieldSelector": f"spec.nodeName={node}"}) for node in nodes),
    )
    return lists[0], [item for found in lists[1:] for item in found]


def _matches(pod: Any, selector: str) -> bool:
    key, _, value = selector.partition("=")
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(key, "")) == value


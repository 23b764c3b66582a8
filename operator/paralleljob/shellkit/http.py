"""The small HTTP server every shell exposes: Prometheus ``/metrics`` and a ``/healthz`` probe."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST


async def serve_metrics(
    render: Callable[[], bytes], health: Callable[[], tuple[bool, str]], host: str, port: int
) -> web.AppRunner:
    """Serve ``render()`` on /metrics and ``health()`` (ok, text) on /healthz (503 when not ok)."""

    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(body=render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        ok, text = health()
        return web.Response(text=text, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner

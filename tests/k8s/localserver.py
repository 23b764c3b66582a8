"""A real HTTP server on loopback for the tests that need one behind the operator's ``Kube``: the client's own
transport (aiohttp, its headers, bodies and streaming) against handlers the test writes."""

from __future__ import annotations

from aiohttp import web
from kubernetes_asyncio import client

from paralleljob.k8s.runtime.api import Kube


async def serve(app: web.Application) -> tuple[web.AppRunner, Kube]:
    """``app`` on a free loopback port, and a ``Kube`` pointed at it; clean up with ``runner.cleanup()``."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, Kube(client.Configuration(host=f"http://127.0.0.1:{port}"))

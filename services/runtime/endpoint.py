"""A process's HTTP endpoint: ``GET /metrics`` in the Prometheus text format.

Every service of a process shares it (:func:`metrics_endpoint` is reference-counted per
address), because ``sandbus up`` runs every worker in one process and they cannot each bind
the same port."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import prometheus_client
from aiohttp import web

from services.runtime.metrics import Metrics

__all__ = ["metrics_endpoint", "serve_metrics"]

log = logging.getLogger(__name__)


async def serve_metrics(metrics: Metrics, host: str, port: int) -> web.AppRunner:
    """Serve ``GET /metrics`` until the returned runner is cleaned up."""

    async def handle(request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.exposition(),
            headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
        )

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("metrics on http://%s:%d/metrics", host, port)
    return runner


@dataclass
class _Shared:
    started: asyncio.Task[web.AppRunner]
    users: int = 0


_OPEN: dict[tuple[str, int], _Shared] = {}


@asynccontextmanager
async def metrics_endpoint(metrics: Metrics, host: str, port: int) -> AsyncIterator[None]:
    """Serve ``metrics`` on ``host:port`` while any service of the process is inside.

    The services of ``sandbus up`` start at the same moment: the first registers the start
    before it awaits it, so the others wait for that one instead of binding the port again."""
    address = (host, port)
    shared = _OPEN.get(address)
    if shared is None:
        shared = _OPEN[address] = _Shared(asyncio.create_task(serve_metrics(metrics, host, port)))
    shared.users += 1
    try:
        await asyncio.shield(shared.started)
        yield
    finally:
        shared.users -= 1
        if shared.users == 0:
            del _OPEN[address]
            started = shared.started
            if not started.done():
                started.cancel()
            elif not started.cancelled() and started.exception() is None:
                await started.result().cleanup()

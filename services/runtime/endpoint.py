"""A process's HTTP endpoint: ``GET /metrics`` in the Prometheus text format.

Every service of a process shares it (:func:`metrics_endpoint` is reference-counted per
address), because ``sandbus up`` runs every worker in one process and they cannot each bind
the same port."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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


_OPEN: dict[tuple[str, int], tuple[web.AppRunner, int]] = {}


@asynccontextmanager
async def metrics_endpoint(metrics: Metrics, host: str, port: int) -> AsyncIterator[None]:
    """Serve ``metrics`` on ``host:port`` while any service of the process is inside."""
    address = (host, port)
    runner, users = _OPEN.get(address) or (await serve_metrics(metrics, host, port), 0)
    _OPEN[address] = (runner, users + 1)
    try:
        yield
    finally:
        runner, users = _OPEN[address]
        if users > 1:
            _OPEN[address] = (runner, users - 1)
        else:
            del _OPEN[address]
            await runner.cleanup()

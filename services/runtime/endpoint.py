"""A process's HTTP endpoint: ``GET /metrics`` in the Prometheus text format (the gauges read
by I/O sampled first, :func:`sample`), ``GET /healthz``
(liveness: the process answers) and ``GET /readyz`` (readiness: every service of the process
says it is ready, see :data:`READINESS`; else 503 with what each one waits for).

Every service of a process shares it (:func:`metrics_endpoint` is reference-counted per
address), because ``sandbus up --one-process`` runs every worker in one process and they cannot
each bind the same port (without it, each service is a process with an endpoint of its own)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import prometheus_client

from services.runtime.metrics import Metrics, SampledGauge

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["READINESS", "metrics_endpoint"]

log = logging.getLogger(__name__)

SAMPLE_TIMEOUT: Final = 2.0
"""Seconds a scrape waits for each gauge read by I/O (well under Prometheus' default scrape
timeout of 10 s)."""

Check = Callable[[], "str | None"]
"""What a service is waiting for before it can serve (None: it is ready)."""


class Readiness:
    """The readiness checks of the services of a process, by service."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def add(self, service: str, check: Check) -> None:
        self._checks[service] = check

    def discard(self, service: str) -> None:
        self._checks.pop(service, None)

    def waiting(self) -> list[str]:
        """``service: what it waits for``, for each service not ready."""
        out = []
        for service, check in sorted(self._checks.items()):
            problem = check()
            if problem:
                out.append(f"{service}: {problem}")
        return out


READINESS = Readiness()
"""The process's readiness, which ``/readyz`` answers from."""


async def sample(metrics: Metrics, within: float = SAMPLE_TIMEOUT) -> None:
    """Read every gauge of ``metrics`` that is read by I/O, all at once, each within
    ``within`` seconds; one that fails or takes longer has no samples until it succeeds."""

    async def one(gauge: SampledGauge) -> None:
        sampler = gauge.sampler
        if sampler is None:
            return
        try:
            async with asyncio.timeout(within):
                samples = await sampler()
        except Exception as error:
            log.warning("sampling %s: %r; no samples until one succeeds", gauge.name, error)
            samples = {}
        gauge.keep(sampler, samples)

    await asyncio.gather(*(one(gauge) for gauge in metrics.sampled()))


async def serve_metrics(metrics: Metrics, host: str, port: int) -> web.AppRunner:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` until the runner is cleaned up."""
    # Imported here: a service without an endpoint (the default) does not carry aiohttp's
    # server, 2 MiB of every process.
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await sample(metrics)  # the gauges read by I/O, as of this scrape
        return web.Response(
            body=metrics.exposition(),
            headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
        )

    async def alive(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def ready(request: web.Request) -> web.Response:
        waiting = READINESS.waiting()
        if waiting:
            return web.Response(status=503, text="".join(f"{line}\n" for line in waiting))
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", handle)
    app.router.add_get("/healthz", alive)
    app.router.add_get("/readyz", ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("metrics and health on http://%s:%d (/metrics, /healthz, /readyz)", host, port)
    return runner


@dataclass
class _Shared:
    started: asyncio.Task[web.AppRunner]
    users: int = 0


_OPEN: dict[tuple[str, int], _Shared] = {}


@asynccontextmanager
async def metrics_endpoint(metrics: Metrics, host: str, port: int) -> AsyncIterator[None]:
    """Serve ``metrics`` on ``host:port`` while any service of the process is inside.

    The services of ``sandbus up --one-process`` start at the same moment: the first registers
    the start before it awaits it, so the others wait for that one instead of binding the port
    again."""
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

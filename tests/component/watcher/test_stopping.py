"""A cancelled watcher stops: promptly, once, and with nothing of it left running.

Whoever runs the watcher in-process (``sandbus up``, a worker's tests) stops it with one
``task.cancel()``, and ``sandbus run watcher`` turns SIGTERM into exactly that. On Python 3.11 a
cancellation can be lost inside nats-py (see :mod:`services.runtime.cancellation`); a lost one
used to leave the watcher running, or waiting forever for a publishing task that carried on.

Each round starts a watcher, cancels it once at a chosen moment, and requires that the task
ends within :data:`BOUND` seconds, cancelled, and that every task it started has ended too.
The moments: at once (before it has run at all), as a standby (another replica holds the
Lease), starting up (provisioning, electing, recovering, relisting), while publishing a burst,
and while NATS is down with publishes pending.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from random import Random

import nats
import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.natsd import NatsServer
from services.runtime.lease import acquired_lease
from services.watcher.service import Watcher
from tests.component.watcher.harness import (
    burst,
    wait_ready,
    watcher_config,
)
from tests.support.waiting import until

BOUND = 5.0
"""Seconds a single cancel may take to stop the whole watcher."""
ROUNDS_PER_MOMENT = 6


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    connection = await nats.connect(
        nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    # The first request opens the connection's shared reply subscription (a task of its own
    # that lives as long as the connection): open it now, before any task is counted.
    await connection.jetstream().account_info()
    yield connection
    await connection.close()


_NOT_THE_WATCHERS = (
    "/nats/aio/client.py",
    "/nats/aio/transport.py",
    "/asyncio/streams.py",
    "/aiohttp/web_",
    "/devtools/cluster/",
    "/asyncio/locks.py",
)
"""Where the coroutines of tasks that are not the watcher's come from: the NATS connection the
test hands in (its reader, flusher, pinger and reconnect loop, replaced across an outage, and the
``open_connection`` a reconnect attempt wraps in a task of its own), and
the development cluster serving in this process (its request handlers, and the ``Event.wait``
tasks its ``asyncio.wait_for`` calls wrap)."""


def _ours(tasks: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    def foreign(task: asyncio.Task[object]) -> bool:
        code = getattr(task.get_coro(), "cr_code", None)
        return code is not None and any(part in code.co_filename for part in _NOT_THE_WATCHERS)

    return {task for task in tasks if not foreign(task)}


async def _stop_once(task: asyncio.Task[None]) -> float:
    """Cancel ``task`` once and wait (without cancelling again) until it ends; return how long
    that took, or fail naming what is still running after :data:`BOUND` seconds."""
    started = time.monotonic()
    task.cancel()
    await asyncio.wait({task}, timeout=BOUND)
    took = time.monotonic() - started
    if not task.done():
        stacks = "\n".join(
            f"{t.get_name()}: {t.get_stack(limit=6)}" for t in _ours(asyncio.all_tasks())
        )
        raise AssertionError(f"the watcher survived a cancel for {BOUND} s; tasks:\n{stacks}")
    assert task.cancelled(), f"the watcher ended with {task.exception()!r}, not cancelled"
    return took


async def _hold_lease_elsewhere(client: k8s.ApiClient, name: str) -> None:
    """Another replica holds the Lease for a long time: the watcher stays a standby."""
    body = acquired_lease(
        None,
        namespace="default",
        name=name,
        identity="someone-else",
        now=datetime.now(UTC),
        timings=watcher_config().lease,
    )
    body["spec"]["leaseDurationSeconds"] = 3600
    await k8s.CustomObjectsApi(client).create_namespaced_custom_object(
        "coordination.k8s.io", "v1", "default", "leases", body
    )


async def test_one_cancel_stops_the_watcher_at_any_moment_and_leaves_no_task(
    client: k8s.ApiClient, nc: Client, nats_server: NatsServer
) -> None:
    rng = Random(20240611)
    await _hold_lease_elsewhere(client, "held-elsewhere")
    durations: dict[str, list[float]] = {}
    bursts: list[asyncio.Task[None]] = []  # writes a moment started, ended after its round

    async def at_once(watcher: Watcher, task: asyncio.Task[None]) -> None:
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)

    async def as_standby(watcher: Watcher, task: asyncio.Task[None]) -> None:
        await until(
            lambda: watcher.elector.standing_by_for == "someone-else",
            within=10.0,
            interval=0.1,
        )
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        assert not watcher.elector.is_leader()

    async def starting_up(watcher: Watcher, task: asyncio.Task[None]) -> None:
        # Provisioning, electing, recovering or relisting, depending on the draw.
        await asyncio.sleep(rng.uniform(0.0, 0.4))

    async def mid_burst(watcher: Watcher, task: asyncio.Task[None]) -> None:
        await wait_ready(watcher, task)
        writes = asyncio.create_task(burst(client, 400, prefix=f"b{rng.randrange(10**6)}"))
        try:
            await until(
                lambda: watcher.session is not None and watcher.stats.published > 20,
                within=20.0,
                interval=0.01,
            )
            await asyncio.sleep(rng.uniform(0.0, 0.2))
        finally:
            bursts.append(writes)

    async def nats_down(watcher: Watcher, task: asyncio.Task[None]) -> None:
        await wait_ready(watcher, task)
        await asyncio.to_thread(nats_server.stop)
        # Changes decided while NATS is away: their publishes wait for acks and retry.
        await burst(client, 20, prefix=f"d{rng.randrange(10**6)}")
        await asyncio.sleep(rng.uniform(0.0, 0.5))

    plans: list[tuple[str, Callable[[Watcher, asyncio.Task[None]], Awaitable[None]], str]] = [
        ("at once", at_once, "sandbus-watcher"),
        ("as a standby", as_standby, "held-elsewhere"),
        ("starting up", starting_up, "sandbus-watcher"),
        ("mid-burst", mid_burst, "sandbus-watcher"),
        ("NATS down", nats_down, "sandbus-watcher"),
    ]
    for round_ in range(ROUNDS_PER_MOMENT):
        for moment, reach, lease_name in plans:
            before = _ours(asyncio.all_tasks())
            config = watcher_config("stopper", lease_name=lease_name)
            watcher = Watcher(nc, client, config)
            task = asyncio.create_task(watcher.run(), name=f"watcher {moment} {round_}")
            try:
                await reach(watcher, task)
                durations.setdefault(moment, []).append(await _stop_once(task))
            finally:
                if not task.done():
                    task.cancel()
                for writes in bursts:
                    writes.cancel()
                    await asyncio.wait({writes}, timeout=BOUND)
                bursts.clear()
                if not nats_server.running:
                    await asyncio.to_thread(nats_server.start)
            left = _ours(asyncio.all_tasks()) - before
            assert not left, f"{moment}, round {round_}: still running: {sorted(map(str, left))}"
            await until(lambda: nc.is_connected, within=10.0, interval=0.05)
    assert {moment: len(times) for moment, times in durations.items()} == {
        moment: ROUNDS_PER_MOMENT for moment, _, _ in plans
    }

"""A worker started while NATS is away: it waits for NATS (its memos, then its feed: the state
table and the event log) instead of ending, then loads what the state table holds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from datetime import datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext

from devtools.natsd import NatsServer
from events.envelope import ObjectKey
from events.types import observed_event
from services.runtime.bus import BusConfig, ensure_bus, publish_event
from services.runtime.reconcile.actions import Plan
from services.runtime.reconcile.feeding import BusFeed
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import Observed, Reconciler, WorkerDefinition
from tests.support.statetable import state_table_copied
from tests.unit.events.samples import NOW, sandbox

BUS = BusConfig()


class Idle:
    """Reads a Sandbox and plans nothing."""

    kind = "Sandbox"

    def observe(self, key: ObjectKey, observed: Observed) -> Any:
        return observed.cache.get(key)

    def plan(self, inputs: Any, now: datetime) -> Plan:
        return Plan(reason="nothing to do")


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[tuple[NatsServer, JetStreamContext]]:
    """A nats-server whose state table holds the Sandbox ``kept``, and a client that
    reconnects to it for as long as it takes."""
    with NatsServer(store_dir=tmp_path / "nats") as server:
        connection = await nats.connect(
            server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1
        )
        try:
            js = connection.jetstream(timeout=1.0)
            await ensure_bus(js, BUS)
            await publish_event(js, observed_event("added", sandbox("kept"), time=NOW), BUS)
            await state_table_copied(js, 1, BUS)
            yield server, js
        finally:
            await connection.close()


async def outage_at_start(server: NatsServer, run: Awaitable[None], loaded: asyncio.Event) -> None:
    """Stop NATS, start ``run``; it must wait out the outage and load once NATS is back."""
    await asyncio.to_thread(server.stop)
    running = asyncio.ensure_future(run)
    try:
        await asyncio.sleep(2.5)  # its first attempts time out
        assert not running.done(), "it gave up while NATS was away"
        assert not loaded.is_set()
        await asyncio.to_thread(server.start)
        async with asyncio.timeout(30):
            await loaded.wait()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_a_worker_started_while_nats_is_away_loads_once_it_is_back(
    bus: tuple[NatsServer, JetStreamContext],
) -> None:
    server, js = bus
    definition = WorkerDefinition(
        name="idle",
        reconcilers=(Reconciler(Idle.kind, Idle().observe, Idle().plan),),
        watched_kinds=("Sandbox",),
        wakes=lambda *_: [],
    )
    worker = Worker(definition, js=js, api=None, bus=BUS)  # type: ignore[arg-type]
    worker.feed.retry_delay = 0.1
    await outage_at_start(server, worker.run(), worker.feed.loaded)
    assert ObjectKey("Sandbox", "default", "kept") in worker.cache


async def test_a_feed_set_up_while_nats_is_away_loads_once_it_is_back(
    bus: tuple[NatsServer, JetStreamContext],
) -> None:
    # The worker loads its memos first: this is the step after, with NATS gone meanwhile.
    server, js = bus
    delivered: list[str] = []
    feed = BusFeed(
        js,
        worker="sandbox",
        kinds=["Sandbox"],
        deliver=lambda event: delivered.append(event.name),
        load=lambda state: delivered.append(state.key.name),
        bus=BUS,
        retry_delay=0.1,
    )
    await outage_at_start(server, feed.run(), feed.loaded)
    assert delivered == ["kept"]

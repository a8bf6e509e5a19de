"""A worker started while NATS is away: it waits for NATS (its memos, then its feed: the state
table and the event log) instead of ending, then loads what the state table holds."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats

from events.types import ObjectEvent, observed_event
from services.runtime.bus import BusConfig, ensure_bus, put_state
from services.runtime.cache import ObjectKey
from services.runtime.natsd import NatsServer
from services.runtime.reconcile import Plan
from services.runtime.reconcile.feeding import BusFeed
from services.runtime.reconcile.worker import Observed, Worker, WorkerDefinition


def sandbox_event(name: str) -> ObjectEvent:
    return observed_event(
        "added",
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "resourceVersion": "7",
            },
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        },
        time=datetime.now(UTC),
    )


class Idle:
    """Reads a Sandbox and plans nothing."""

    kind = "Sandbox"

    def observe(self, key: ObjectKey, observed: Observed) -> Any:
        return observed.cache.get(key)

    def plan(self, inputs: Any, now: datetime) -> Plan:
        return Plan(reason="nothing to do")


async def test_a_worker_started_while_nats_is_away_loads_once_it_is_back(tmp_path: Path) -> None:
    bus = BusConfig()
    with NatsServer(store_dir=tmp_path / "nats") as server:
        connection = await nats.connect(
            server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1
        )
        try:
            js = connection.jetstream(timeout=1.0)
            await ensure_bus(js, bus)
            await put_state(js, sandbox_event("kept"), bus)
            definition = WorkerDefinition(
                name="idle",
                reconcilers=(Idle(),),
                watched_kinds=("Sandbox",),
                wakes=lambda kind, obj, cache: [],
            )
            worker = Worker(definition, js=js, api=None, bus=bus)  # type: ignore[arg-type]
            worker.feed.retry_delay = 0.1
            await asyncio.to_thread(server.stop)
            running = asyncio.create_task(worker.run())
            try:
                await asyncio.sleep(2.5)  # its first attempts time out
                assert not running.done(), "the worker gave up while NATS was away"
                assert not worker.feed.loaded.is_set()
                await asyncio.to_thread(server.start)
                async with asyncio.timeout(30):
                    await worker.feed.loaded.wait()
                assert ObjectKey("Sandbox", "default", "kept") in worker.cache
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
        finally:
            await connection.close()


async def test_a_feed_set_up_while_nats_is_away_loads_once_it_is_back(tmp_path: Path) -> None:
    # The worker loads its memos first: this is the step after, with NATS gone meanwhile.
    bus = BusConfig()
    with NatsServer(store_dir=tmp_path / "nats") as server:
        connection = await nats.connect(
            server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1
        )
        try:
            js = connection.jetstream(timeout=1.0)
            await ensure_bus(js, bus)
            await put_state(js, sandbox_event("kept"), bus)
            delivered: list[str] = []
            feed = BusFeed(
                js,
                worker="sandbox",
                kinds=["Sandbox"],
                deliver=lambda event: delivered.append(event.name),
                bus=bus,
                retry_delay=0.1,
            )
            await asyncio.to_thread(server.stop)
            running = asyncio.create_task(feed.run())
            try:
                await asyncio.sleep(2.5)
                assert not running.done(), "the feed gave up while NATS was away"
                await asyncio.to_thread(server.start)
                async with asyncio.timeout(30):
                    await feed.loaded.wait()
                assert delivered == ["kept"]
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
        finally:
            await connection.close()

"""The consumer loop every worker reads the event log through, against a real nats-server: its
own pull requests instead of nats-py's fetch (services/runtime/consume.py), renewed as they
fill or expire, and stopped by one cancel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.codec import encode_event
from events.subjects import event_subject
from events.types import Event, observed_event
from services.runtime import consume
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.consume import ConsumeStats, consume_events
from tests.support.waiting import until
from tests.unit.events.samples import NOW, sandbox

SUBJECT = event_subject("Sandbox", "default", "my.app")


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_url)
    await ensure_bus(connection.jetstream(), BusConfig())
    yield connection
    await connection.close()


@contextlib.asynccontextmanager
async def consuming(
    nc: Client, handled: list[Event], stats: ConsumeStats, *, batch: int, durable: str | None = None
) -> AsyncIterator[asyncio.Task[None]]:
    async def handle(event: Event, msg: Msg) -> None:
        handled.append(event)

    started = asyncio.Event()
    task = asyncio.create_task(
        consume_events(
            nc.jetstream(),
            filter_subjects=["sandbus.events.>"],
            handle=handle,
            rejected_by="test-worker",
            durable=durable,
            batch=batch,
            stats=stats,
            started=started,
        )
    )
    await started.wait()
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def version(number: int) -> bytes:
    return encode_event(observed_event("modified", sandbox(resource_version=str(number)), time=NOW))


async def test_events_trickling_in_are_handled_in_order_across_many_pulls(nc: Client) -> None:
    """A batch of 4: the loop asks for more as each half arrives, and loses nothing."""
    js = nc.jetstream()
    handled: list[Event] = []
    stats = ConsumeStats()
    async with consuming(nc, handled, stats, batch=4):
        for number in range(1, 41):
            await js.publish(SUBJECT, version(number))
            if number % 7 == 0:
                await asyncio.sleep(0.01)
        await until(lambda: stats.handled == 40, within=10)
    assert [event.id.split(":")[1] for event in handled] == [str(n) for n in range(1, 41)]
    assert stats.pending == 0


async def test_a_pull_that_expires_while_nothing_happens_is_renewed(
    nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consume, "PULL_EXPIRES", 0.3)
    monkeypatch.setattr(consume, "_EXPIRY_MARGIN", 0.2)
    handled: list[Event] = []
    stats = ConsumeStats()
    async with consuming(nc, handled, stats, batch=8):
        await asyncio.sleep(1.2)  # several requests expire unanswered
        await nc.jetstream().publish(SUBJECT, version(7))
        await until(lambda: stats.handled == 1, within=5)


async def test_a_consumer_gone_is_said_and_the_loop_keeps_asking(
    nc: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The durable deleted under the loop (the bus reset): it says so and keeps going, for
    the feed to notice and set the worker up again (services/runtime/reconcile/feeding.py)."""
    monkeypatch.setattr(consume, "PULL_EXPIRES", 0.3)
    monkeypatch.setattr(consume, "_EXPIRY_MARGIN", 0.2)
    js = nc.jetstream()
    handled: list[Event] = []
    with caplog.at_level(logging.WARNING):
        async with consuming(nc, handled, ConsumeStats(), batch=8, durable="gone") as task:
            await js.delete_consumer("SANDBUS_EVENTS", "gone")
            await until(lambda: "pulling events" in caplog.text, within=5)
            assert not task.done()


async def test_one_cancel_stops_the_loop_and_lets_go_of_its_inbox(nc: Client) -> None:
    subscriptions = len(nc._subs)
    handled: list[Event] = []
    async with consuming(nc, handled, ConsumeStats(), batch=8) as task:
        assert len(nc._subs) == subscriptions + 1
        task.cancel()
        await asyncio.wait({task}, timeout=2.0)
        assert task.cancelled()
    assert len(nc._subs) == subscriptions

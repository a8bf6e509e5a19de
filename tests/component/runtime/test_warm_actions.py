"""The warm-queue action kinds and the pull source, against a real nats-server: an entry is
queued once however often it is enqueued, a purge takes one entry or a whole queue, and a
message that names no object is dead-lettered by the source instead of wedging it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StreamConfig

from events.envelope import ObjectKey
from events.subjects import warm_queue_filter
from events.types import WarmEntry, warm_queued_event
from services.domain.agentsandbox.warmqueue import Enqueue, Purge
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Plan
from services.runtime.reconcile.executing import ExecutionContext, execute
from services.runtime.reconcile.sources import Delivery, PullSource
from services.runtime.reconcile.warm import WARM_EXECUTORS

BUS = BusConfig(storage="memory")


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_bus(js, BUS)
        yield js
    finally:
        await nc.close()


def entry(name: str, template_hash: str = "h1") -> Enqueue:
    event = warm_queued_event(
        "Sandbox",
        "default",
        name,
        WarmEntry(uid=f"uid-{name}", resource_version="5", template_hash=template_hash),
        time=datetime.now(UTC),
        source="sandbus/pool",
    )
    return Enqueue(event)


async def run(js: JetStreamContext, *actions: object) -> list[str]:
    context = ExecutionContext(api=None, cache=ObjectCache(), js=js, bus=BUS)  # type: ignore[arg-type]
    done = await execute(Plan(actions=actions), WARM_EXECUTORS, context)  # type: ignore[arg-type]
    assert done.error is None, done.error
    return [outcome.note for outcome in done.outcomes]


async def depth(js: JetStreamContext) -> int:
    return int((await js.stream_info(BUS.warm_stream)).state.messages)


async def test_an_entry_is_queued_once_however_often_it_is_enqueued(js: JetStreamContext) -> None:
    notes = await run(js, entry("a"), entry("a"), entry("b"))
    assert notes[1] == "already queued"
    assert notes[0].startswith("queued on sandbus.warm.default.h1.")
    assert await depth(js) == 2


async def test_a_purge_takes_one_entry_or_a_whole_queue(js: JetStreamContext) -> None:
    await run(js, entry("a"), entry("b"), entry("c", template_hash="h2"))
    ghost = ObjectKey("Sandbox", "default", "a")
    subject = "sandbus.warm.default.h1.=.=.a"
    await run(js, Purge(subject, ghost))
    assert await depth(js) == 2
    template = ObjectKey("SandboxTemplate", "default", "t1")
    await run(js, Purge(warm_queue_filter("default", "h1"), template))
    assert await depth(js) == 1, "the other template's queue is untouched"
    assert await run(js, entry("a")) == ["queued on sandbus.warm.default.h1.=.=.a"], "queued anew"


async def test_the_pull_source_delivers_work_and_dead_letters_garbage(
    js: JetStreamContext,
) -> None:
    await js.add_stream(
        StreamConfig(name="WORK", subjects=["work.>"], retention=RetentionPolicy.WORK_QUEUE)
    )
    delivered: list[Delivery] = []
    arrived = asyncio.Event()

    def deliver(delivery: Delivery) -> None:
        delivered.append(delivery)
        arrived.set()

    source = PullSource(
        name="work",
        stream="WORK",
        durable="work",
        filter_subject="work.>",
        key_for=lambda subject, data: (
            ObjectKey("Widget", "ns", data["name"])
            if isinstance(data, dict) and "name" in data
            else None
        ),
        bus=BUS,
    )
    running = asyncio.create_task(source.run(js, deliver, lambda: 10))
    try:
        await js.publish("work.one", b"not json", stream="WORK")
        await js.publish("work.two", json.dumps({"other": 1}).encode(), stream="WORK")
        await js.publish("work.three", json.dumps({"name": "w"}).encode(), stream="WORK")
        async with asyncio.timeout(10):
            await arrived.wait()
        (work,) = delivered
        assert work.key == ObjectKey("Widget", "ns", "w")
        assert work.message.data == {"name": "w"} and work.message.token.startswith("WORK:")
        dead = await js.stream_info(BUS.dead_letter_stream)
        assert dead.state.messages == 2
        await work.handle.ack_sync()
        assert (await js.stream_info("WORK")).state.messages == 0, "acked: the work is done"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

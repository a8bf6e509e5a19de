"""A feed that resumes its durable (a restart, a Lease won back) while the state table has not
been copied as far as the durable had delivered: the changes in between reach it all the same.

Found by the chaos soak (bench/soak.py): after NATS itself restarted, the server's copying of the
event log into the state table was seconds behind; a pool worker that won its Lease back then
loaded a state table without the members it had just made, and the durable did not deliver
them again, so the pool made them a second time and never queued the first ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from nats.js import JetStreamContext

from events.types import observed_event
from services.runtime.bus import BusConfig, ensure_bus, publish_event
from services.runtime.cancellation import stop_tasks
from services.runtime.reconcile.feeding import BusFeed, origin_sequence
from tests.support.statetable import state_table_copied
from tests.support.waiting import until
from tests.unit.events.samples import NOW, sandbox

BUS = BusConfig()


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[JetStreamContext]:
    connection = await nats.connect(nats_url)
    try:
        js = connection.jetstream()
        await ensure_bus(js, BUS)
        yield js
    finally:
        await connection.close()


def sandbox_feed(js: JetStreamContext, seen: dict[str, str]) -> BusFeed:
    """The sandbox worker's feed, recording each Sandbox's latest resourceVersion it got."""

    def take(name: str, rv: str) -> None:
        seen[name] = rv

    return BusFeed(
        js,
        worker="sandbox",
        kinds=["Sandbox"],
        deliver=lambda e: take(e.name, e.data.object["metadata"]["resourceVersion"]),
        load=lambda state: take(state.key.name, state.resource_version),
        bus=BUS,
        retry_delay=0.1,
    )


async def added(js: JetStreamContext, name: str, rv: str) -> None:
    """The watcher's event of a new Sandbox ``name`` at resourceVersion ``rv``."""
    event = observed_event("added", sandbox(name, resource_version=rv), time=NOW)
    await publish_event(js, event, BUS)


async def test_a_resumed_durable_gets_what_the_state_table_has_not_copied_yet(
    js: JetStreamContext,
) -> None:
    await publish_event(
        js, observed_event("added", sandbox("old", resource_version="1"), time=NOW), BUS
    )
    await state_table_copied(js, 1, BUS)
    first: dict[str, str] = {}
    earlier = sandbox_feed(js, first)
    running = asyncio.create_task(earlier.run())
    await until(earlier.loaded.is_set)
    for name, rv in (("made", "2"), ("later", "3")):
        await publish_event(
            js, observed_event("added", sandbox(name, resource_version=rv), time=NOW), BUS
        )
    await until(lambda: {"made", "later"} <= first.keys())  # delivered, and acked
    await stop_tasks([running])
    await state_table_copied(js, 3, BUS)
    # As if the server had not copied the last two changes yet: the state table ends at "old".
    for name in ("made", "later"):
        await js.purge_stream(BUS.state_stream, subject=f"sandbus.state.sandbox.default.{name}")

    second: dict[str, str] = {}
    resumed = sandbox_feed(js, second)
    running = asyncio.create_task(resumed.run())
    try:
        await until(resumed.loaded.is_set)
        assert second == {"old": "1", "made": "2", "later": "3"}
    finally:
        await stop_tasks([running])


def test_the_origin_of_a_copy_is_read_from_the_header_the_server_stamps() -> None:
    stamp = "SANDBUS_EVENTS 41 sandbus.events.> sandbus.state.> sandbus.events.pod.a.b XyZ"
    assert origin_sequence({"Nats-Stream-Source": stamp}, "SANDBUS_EVENTS") == 41
    assert origin_sequence({"Nats-Stream-Source": stamp}, "OTHER") == 0
    assert origin_sequence({}, "SANDBUS_EVENTS") == 0
    assert origin_sequence(None, "SANDBUS_EVENTS") == 0

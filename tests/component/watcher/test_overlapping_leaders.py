"""Two leaders for a moment: a stale one must not make an older state the latest in the state table.

A handover leaves a window in which the old leader still publishes what it decided before it
noticed the loss. Both write through the subject-sequence fence; when the fence finds another
writer's message, the event log takes ours after it (the log keeps every event), but the state
table keeps whichever state of the object is newer. Here leader A publishes an object at
resourceVersion 10, and a stale leader B, which never saw A's writes, then publishes the same
object at resourceVersion 9.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from events.codec import decode_event
from events.envelope import ObjectKey
from events.subjects import event_subject, state_subject
from events.types import ObjectAdded, ObjectDeleted, ObjectEvent, ObjectModified
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.cancellation import stop_tasks
from services.runtime.streams import read_to_end
from services.watcher.core.diffing import Change
from services.watcher.core.recovery import LowWater
from services.watcher.publisher import Publisher
from services.watcher.resources import WATCHED_RESOURCES
from services.watcher.streams import PublishStats, last_message

KEY = ObjectKey("Sandbox", "default", "sb")
BUS = BusConfig(duplicate_window=0.2)


def sandbox(resource_version: str, uid: str = "uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": KEY.name,
            "namespace": KEY.namespace,
            "uid": uid,
            "resourceVersion": resource_version,
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "x"}]}}},
    }


def change(kind: str, resource_version: str, uid: str = "uid-1") -> Change:
    obj = sandbox(resource_version, uid)
    return Change(kind, KEY, uid, resource_version, obj)  # type: ignore[arg-type]


@pytest.fixture
async def js(nc: Client) -> AsyncIterator[JetStreamContext]:
    stream = nc.jetstream()
    await ensure_bus(stream, BUS)
    yield stream


def leader(nc: Client) -> Publisher:
    """A leader that recovered an empty bus: it knows no subject sequence."""
    return Publisher(
        nc,
        bus=BUS,
        resources={r.kind: r for r in WATCHED_RESOURCES},
        may_write=lambda: True,
        low_water=LowWater(1),
        seqs={},
        shards=1,
        stats=PublishStats(),
    )


async def publish(publisher: Publisher, *changes: Change) -> None:
    task = asyncio.create_task(publisher.run())
    try:
        for each in changes:
            await publisher.submit(each)
        async with asyncio.timeout(10):
            await publisher.idle()
    finally:
        await stop_tasks((task,))


async def latest_state(js: JetStreamContext) -> ObjectEvent:
    last = await last_message(
        js, BUS.state_stream, state_subject(KEY.kind, KEY.namespace, KEY.name)
    )
    assert last is not None and last.data
    event = decode_event(last.data)
    assert isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted)
    return event


async def logged_ids(js: JetStreamContext) -> list[str]:
    subject = event_subject(KEY.kind, KEY.namespace, KEY.name)
    return [
        decode_event(msg.data).id async for msg in read_to_end(js, BUS.event_log_stream, [subject])
    ]


async def test_a_stale_leader_leaves_the_newer_state_in_the_state_table(
    nc: Client, js: JetStreamContext
) -> None:
    a, b = leader(nc), leader(nc)
    await publish(a, change("added", "8"), change("modified", "10"))
    await publish(b, change("modified", "9"))

    latest = await latest_state(js)
    assert latest.data.object["metadata"]["resourceVersion"] == "10"
    assert b.stats.superseded == 1
    # The event log keeps every event, the stale one included, after A's.
    assert await logged_ids(js) == ["uid-1:8:added", "uid-1:10:modified", "uid-1:9:modified"]


async def test_a_newer_state_of_the_same_object_still_replaces_an_older_one(
    nc: Client, js: JetStreamContext
) -> None:
    a, b = leader(nc), leader(nc)
    await publish(a, change("added", "8"))
    await publish(b, change("modified", "9"))

    assert (await latest_state(js)).data.object["metadata"]["resourceVersion"] == "9"
    assert b.stats.superseded == 0


async def test_a_new_incarnation_is_written_whatever_its_resource_version(
    nc: Client, js: JetStreamContext
) -> None:
    a, b = leader(nc), leader(nc)
    await publish(a, change("added", "10", uid="uid-1"))
    await publish(b, change("added", "9", uid="uid-2"))

    assert (await latest_state(js)).data.object["metadata"]["uid"] == "uid-2"

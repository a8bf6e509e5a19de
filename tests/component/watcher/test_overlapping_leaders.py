"""Two leaders for a moment: a stale one must not make an older state an object's latest.

A handover leaves a window in which the old leader still publishes what it decided before it
noticed the loss. Both write through the subject-sequence fence; when the fence finds another
writer's message that is a state of the object at least as new, ours is not written, so the
log's last event of the object, and the state table the server derives from the log, stay the
newer state. Here leader A publishes an object at resourceVersion 10, and a stale leader B,
which never saw A's writes, then publishes the same object at resourceVersion 9.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from events.codec import decode_event
from events.envelope import ObjectKey
from events.subjects import event_subject, state_subject
from events.types import ObjectAdded, ObjectDeleted, ObjectModified
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.cancellation import stop_tasks
from services.runtime.streams import read_to_end
from services.watcher.core.diffing import Change
from services.watcher.publisher import Publisher
from services.watcher.resources import WATCHED_RESOURCES
from services.watcher.streams import PublishStats, last_message
from services.watcher.tombstones import Tombstones
from tests.support.waiting import until

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
        seqs={},
        tombstones=Tombstones(nc.jetstream(), BUS.state_stream, BUS.state_tombstone_ttl),
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


async def latest_state(js: JetStreamContext, resource_version: str, uid: str = "uid-1") -> None:
    """Wait until the state table holds the object at ``resource_version`` (it is copied from
    the log by the server, a moment after the write)."""

    async def holds() -> str:
        last = await last_message(
            js, BUS.state_stream, state_subject(KEY.kind, KEY.namespace, KEY.name)
        )
        if last is None or not last.data:
            return ""
        event = decode_event(last.data)
        assert isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted)
        metadata = event.data.object["metadata"]
        return f"{metadata['uid']}@{metadata['resourceVersion']}"

    await until(lambda: _equal(holds(), f"{uid}@{resource_version}"), within=10)


async def _equal(value: Awaitable[str], expected: str) -> bool:
    return await value == expected


async def logged_ids(js: JetStreamContext) -> list[str]:
    subject = event_subject(KEY.kind, KEY.namespace, KEY.name)
    return [
        decode_event(msg.data).id async for msg in read_to_end(js, BUS.event_log_stream, [subject])
    ]


async def test_a_stale_leader_does_not_log_an_older_state_after_a_newer_one(
    nc: Client, js: JetStreamContext
) -> None:
    a, b = leader(nc), leader(nc)
    await publish(a, change("added", "8"), change("modified", "10"))
    await publish(b, change("modified", "9"))

    assert b.stats.superseded == 1
    assert await logged_ids(js) == ["uid-1:8:added", "uid-1:10:modified"]
    await latest_state(js, "10")


async def test_a_newer_state_of_the_same_object_still_follows_an_older_one(
    nc: Client, js: JetStreamContext
) -> None:
    a, b = leader(nc), leader(nc)
    await publish(a, change("added", "8"))
    await publish(b, change("modified", "9"))

    assert b.stats.superseded == 0
    assert await logged_ids(js) == ["uid-1:8:added", "uid-1:9:modified"]
    await latest_state(js, "9")


async def test_a_new_incarnation_is_written_whatever_its_resource_version(
    nc: Client, js: JetStreamContext
) -> None:
    a, b = leader(nc), leader(nc)
    await publish(a, change("added", "10", uid="uid-1"))
    await publish(b, change("added", "9", uid="uid-2"))

    await latest_state(js, "9", uid="uid-2")

"""A deleted object's tombstone leaves the state table once its time is up, and nothing else does.

The server copies the event log into the state table, so the watcher removes the tombstones
(services/watcher/tombstones.py). Here the log is written by hand, with a real nats-server,
and a cleaner with a short time to live runs beside it; the last test runs whole watchers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client
from nats.js import JetStreamContext

from devtools.natsd import NatsServer
from events.codec import decode_event
from events.subjects import state_subject
from events.types import observed_event
from services.runtime.bus import BusConfig, ensure_bus, publish_event
from services.runtime.cancellation import stop_tasks
from services.watcher.streams import last_message
from services.watcher.tombstones import Tombstones
from tests.component.watcher.harness import (
    ClusterHistory,
    example,
    running_watcher,
    wait_caught_up,
    watcher_config,
)
from tests.support.statetable import state_table_copied
from tests.support.waiting import until

BUS = BusConfig(duplicate_window=0.2)
SUBJECT = state_subject("Sandbox", "default", "sb")


def sandbox(uid: str, resource_version: str) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": "sb",
            "namespace": "default",
            "uid": uid,
            "resourceVersion": resource_version,
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "x"}]}}},
    }


@pytest.fixture
async def js(nc: Client) -> AsyncIterator[JetStreamContext]:
    stream = nc.jetstream()
    await ensure_bus(stream, BUS)
    yield stream


async def log(js: JetStreamContext, change: str, uid: str, version: str) -> tuple[str, int]:
    """Append a change to the event log; its event id and sequence."""
    event = observed_event(change, sandbox(uid, version), time=datetime.now(UTC))  # type: ignore[arg-type]
    ack = await publish_event(js, event, BUS)
    return event.id, ack.seq


async def state_holds(js: JetStreamContext) -> str | None:
    """The id of the event the state table holds for the object, or None."""
    last = await last_message(js, BUS.state_stream, SUBJECT)
    return decode_event(last.data).id if last is not None and last.data else None


@pytest.fixture
async def cleaner(js: JetStreamContext) -> AsyncIterator[Tombstones]:
    tombstones = Tombstones(js, BUS.state_stream, ttl=0.5)
    task = asyncio.create_task(tombstones.run())
    yield tombstones
    await stop_tasks((task,))


async def test_a_tombstone_leaves_once_its_time_is_up(
    js: JetStreamContext, cleaner: Tombstones
) -> None:
    await log(js, "added", "u1", "5")
    deletion, seq = await log(js, "deleted", "u1", "6")
    await state_table_copied(js, 1)
    assert await state_holds(js) == deletion
    cleaner.schedule(SUBJECT, deletion, seq)

    await until(lambda: cleaner.removed == 1, within=10, what="the tombstone to go")
    assert await state_holds(js) is None and len(cleaner) == 0
    # The log keeps the deletion: only the table forgets it.
    assert await last_message(js, BUS.event_log_stream, SUBJECT.replace(".state.", ".events."))


async def test_an_object_created_again_under_the_name_keeps_its_state(
    js: JetStreamContext, cleaner: Tombstones
) -> None:
    await log(js, "added", "u1", "5")
    deletion, seq = await log(js, "deleted", "u1", "6")
    again, _ = await log(js, "added", "u2", "7")
    cleaner.schedule(SUBJECT, deletion, seq)

    await until(lambda: len(cleaner) == 0, within=10, what="the schedule to be settled")
    await state_table_copied(js, 1)
    assert await state_holds(js) == again
    assert cleaner.removed == 0


async def test_a_deletion_not_copied_yet_is_looked_at_again(
    js: JetStreamContext, cleaner: Tombstones
) -> None:
    """Scheduled before the table holds it (the copy lags the log), and removed once it does."""
    _, added_seq = await log(js, "added", "u1", "5")
    await state_table_copied(js, 1)
    deletion_id = "u1:6:deleted"
    cleaner.schedule(SUBJECT, deletion_id, added_seq + 1, deleted_at=0.0)  # long due
    await asyncio.sleep(0.3)
    assert len(cleaner) == 1, "a state older than the deletion must not settle it"

    deletion, _ = await log(js, "deleted", "u1", "6")
    assert deletion == deletion_id
    await until(lambda: cleaner.removed == 1, within=10, what="the tombstone to go")
    assert await state_holds(js) is None


async def test_the_cleaner_rides_out_a_nats_restart(
    js: JetStreamContext, cleaner: Tombstones, nats_server: NatsServer
) -> None:
    await log(js, "added", "u1", "5")
    deletion, seq = await log(js, "deleted", "u1", "6")
    await state_table_copied(js, 1)
    await asyncio.to_thread(nats_server.stop)
    cleaner.schedule(SUBJECT, deletion, seq, deleted_at=0.0)
    await asyncio.sleep(1.5)  # it tries, fails, and tries again
    await asyncio.to_thread(nats_server.start)

    await until(lambda: cleaner.removed == 1, within=20, what="the tombstone to go")
    assert await state_holds(js) is None


async def test_a_new_leader_removes_the_tombstones_its_predecessor_left(
    client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    custom = k8s.CustomObjectsApi(client)
    args = ("agents.x-k8s.io", "v1beta1", "default", "sandboxes")
    bus = BusConfig(duplicate_window=0.2, state_tombstone_ttl=1)
    js = nc.jetstream()
    await custom.create_namespaced_custom_object(*args, example("Sandbox", "gone"))
    await custom.create_namespaced_custom_object(*args, example("Sandbox", "kept"))
    long_lived = watcher_config("first", bus=BusConfig(duplicate_window=0.2))
    async with running_watcher(nc, client, long_lived):
        await wait_caught_up(js, history, ["Sandbox"])
        await custom.delete_namespaced_custom_object(*args, "gone")
        await wait_caught_up(js, history, ["Sandbox"])
    await state_table_copied(js, 2)
    gone = state_subject("Sandbox", "default", "gone")
    assert await last_message(js, bus.state_stream, gone) is not None

    async with running_watcher(nc, client, watcher_config("second", bus=bus)) as watcher:
        assert watcher.session is not None and watcher.session.tombstones is not None
        tombstones = watcher.session.tombstones
        await until(
            lambda: tombstones.removed == 1, within=10, what="the predecessor's tombstone to go"
        )
        assert await last_message(js, bus.state_stream, gone) is None
    assert await last_message(js, bus.state_stream, state_subject("Sandbox", "default", "kept"))

"""Garbage on an event subject: the consumers dead-letter it with a reason and carry on, and the
watcher's own recovery, which reads the same subjects, steps over it.

The watcher only publishes; what consumes the event subjects is
:func:`services.runtime.consume.consume_events`, which every worker uses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from events.codec import encode_event
from events.headers import DLQ_REASON, DLQ_REJECTED_BY, DLQ_SUBJECT
from events.subjects import event_subject
from events.types import Event, observed_event
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.consume import (
    Accepted,
    ConsumeStats,
    Rejected,
    Skipped,
    classify,
    consume_events,
)
from tests.component.watcher.harness import (
    ClusterHistory,
    api_client,
    example,
    quiet_cluster,
    record_history,
    running_watcher,
    wait_caught_up,
    watcher_config,
)
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
    js: JetStreamContext,
    handle: Any,
    stats: ConsumeStats,
    wanted: Callable[[str, bytes], bool] | None = None,
) -> AsyncIterator[None]:
    started = asyncio.Event()
    task = asyncio.create_task(
        consume_events(
            js,
            filter_subjects=["sandbus.events.>"],
            handle=handle,
            rejected_by="test-worker",
            max_deliver=2,
            stats=stats,
            started=started,
            wanted=wanted,
        )
    )
    await started.wait()
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_classify_accepts_rejects_and_skips() -> None:
    good = encode_event(observed_event("added", sandbox(), time=NOW))
    assert isinstance(classify(SUBJECT, good), Accepted)
    garbage = classify(SUBJECT, b"\x00not json")
    assert isinstance(garbage, Rejected) and "not valid JSON" in garbage.reason
    elsewhere = classify(event_subject("Sandbox", "default", "other"), good)
    assert isinstance(elsewhere, Rejected) and "belongs on " + SUBJECT in elsewhere.reason
    newer = b'{"specversion": "1.0", "type": "io.example.future.v9", "id": "x"}'
    assert isinstance(classify(SUBJECT, newer), Skipped)
    assert isinstance(classify(SUBJECT, newer, unknown_types="dead-letter"), Rejected)


async def test_garbage_on_an_event_subject_is_dead_lettered_and_the_consumer_carries_on(
    nc: Client,
) -> None:
    js = nc.jetstream()
    handled: list[Event] = []

    async def handle(event: Event, msg: Msg) -> None:
        handled.append(event)

    stats = ConsumeStats()
    async with consuming(js, handle, stats):
        await js.publish(SUBJECT, b'{"specversion": "1.0", "type": 42}')
        tampered = encode_event(observed_event("added", sandbox(), time=NOW)).replace(
            b'"resourceVersion":"42"', b'"resourceVersion":"43"'
        )
        await js.publish(SUBJECT, tampered)
        good = observed_event("modified", sandbox(resource_version="44"), time=NOW)
        await js.publish(SUBJECT, encode_event(good))

        async def settled() -> bool:
            return stats.dead_lettered == 2 and stats.handled == 1

        await until(settled, within=10.0, interval=0.1)
    assert [e.id for e in handled] == [good.id]

    dlq = await js.pull_subscribe("sandbus.dlq.>", stream="SANDBUS_DLQ")
    letters = await dlq.fetch(2, timeout=5.0)
    assert [m.subject for m in letters] == ["sandbus.dlq.events.sandbox.default.my_app"] * 2
    reasons = [m.headers[DLQ_REASON] for m in letters if m.headers]
    assert "attribute `type`" in reasons[0]
    assert "attribute `id`" in reasons[1]
    for letter in letters:
        assert letter.headers is not None
        assert letter.headers[DLQ_SUBJECT] == SUBJECT
        assert letter.headers[DLQ_REJECTED_BY] == "test-worker"
    assert letters[1].data == tampered  # the evidence, byte for byte


async def test_what_the_consumer_does_not_want_is_acked_unread_and_garbage_still_dead_lettered(
    nc: Client,
) -> None:
    """``wanted`` turns a message away before it is decoded: acked, counted and never handled.
    What it lets through is classified as ever, garbage included."""
    js = nc.jetstream()
    handled: list[Event] = []

    async def handle(event: Event, msg: Msg) -> None:
        handled.append(event)

    unwanted = encode_event(observed_event("added", sandbox(resource_version="41"), time=NOW))
    stats = ConsumeStats()
    async with consuming(js, handle, stats, wanted=lambda _, payload: payload != unwanted):
        await js.publish(SUBJECT, unwanted)
        await js.publish(SUBJECT, b"\x00not json")
        good = observed_event("modified", sandbox(resource_version="44"), time=NOW)
        await js.publish(SUBJECT, encode_event(good))
        await until(
            lambda: (stats.filtered, stats.dead_lettered, stats.handled) == (1, 1, 1),
            within=10.0,
            interval=0.1,
        )
    assert [e.id for e in handled] == [good.id]


async def test_a_handler_that_keeps_failing_dead_letters_the_event_after_its_retries(
    nc: Client,
) -> None:
    js = nc.jetstream()
    attempts: list[str] = []

    async def handle(event: Event, msg: Msg) -> None:
        attempts.append(event.id)
        raise RuntimeError("cannot reconcile")

    stats = ConsumeStats()
    async with consuming(js, handle, stats):
        event = observed_event("added", sandbox(), time=datetime.now(UTC))
        await js.publish(SUBJECT, encode_event(event))

        async def dead() -> bool:
            return stats.dead_lettered == 1

        await until(dead, within=15.0, interval=0.1)
    assert attempts == [event.id, event.id]
    letter = await js.get_last_msg("SANDBUS_DLQ", "sandbus.dlq.events.sandbox.default.my_app")
    assert letter.headers is not None
    assert "handler failed 2 times" in letter.headers[DLQ_REASON]
    assert "cannot reconcile" in letter.headers[DLQ_REASON]


async def test_the_watcher_recovers_over_garbage_on_its_subjects(
    nc: Client, tmp_path: Path
) -> None:
    js = nc.jetstream()
    # The server copies it into the state table too: the recovery reads it in both.
    await js.publish(event_subject("Sandbox", "default", "x"), b"garbage")
    async with quiet_cluster() as cluster, api_client(cluster, tmp_path) as client:
        history: ClusterHistory = record_history(cluster)
        custom = k8s.CustomObjectsApi(client)
        await custom.create_namespaced_custom_object(
            "agents.x-k8s.io", "v1beta1", "default", "sandboxes", example("Sandbox", "x")
        )
        async with running_watcher(nc, client, watcher_config()):
            logged = await wait_caught_up(js, history, ["Sandbox"], strict=False)
    assert [(e.event.name, e.change) for e in logged] == [("x", "added")]

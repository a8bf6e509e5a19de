"""The bus against a real nats-server: provisioning, dedup, warm queues, state table, dead letters,
and an outside subscriber that knows nothing but the JSON Schemas."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import NoStreamResponseError, NotFoundError

from events.codec import EventDecodeError, decode_event, encode_event
from events.headers import DLQ_REASON, DLQ_REJECTED_BY, DLQ_SUBJECT, MSG_ID
from events.subjects import (
    event_filter,
    event_subject,
    state_subject,
    warm_consumer_name,
    warm_queue_filter,
)
from events.types import observed_event
from services.runtime.bus import (
    BusConfig,
    BusProvisioningError,
    dead_letter,
    enqueue_warm,
    ensure_bus,
    publish_event,
    source_sequence,
    stream_configs,
)
from tests.support.statetable import state_table_copied
from tests.unit.events.samples import NOW, TRACEPARENT, a_decision, a_warm_entry, sandbox

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
STREAMS = ("SANDBUS_EVENTS", "SANDBUS_STATE", "SANDBUS_WARM", "SANDBUS_DLQ", "SANDBUS_MEMO")


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await nats.connect(nats_url)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def js(nc: Client) -> JetStreamContext:
    return nc.jetstream()


@pytest.fixture
async def bus(js: JetStreamContext) -> JetStreamContext:
    await ensure_bus(js)
    return js


# --- provisioning ------------------------------------------------------------------------


async def test_ensure_bus_creates_the_four_streams_as_configured(js: JetStreamContext) -> None:
    report = await ensure_bus(js)
    assert report == dict.fromkeys(STREAMS, "created")

    events = (await js.stream_info("SANDBUS_EVENTS")).config
    assert sorted(events.subjects or []) == ["sandbus.decisions.>", "sandbus.events.>"]
    assert (events.retention, events.max_age, events.duplicate_window) == ("limits", 7 * 86400, 300)
    assert events.max_bytes == 1 << 30 and events.allow_direct

    state = (await js.stream_info("SANDBUS_STATE")).config
    assert (state.max_msgs_per_subject, state.allow_msg_ttl) == (1, True)

    warm = (await js.stream_info("SANDBUS_WARM")).config
    assert (warm.retention, warm.discard, warm.discard_new_per_subject) == (
        "workqueue",
        "new",
        True,
    )
    assert warm.max_msgs_per_subject == 1

    dlq = (await js.stream_info("SANDBUS_DLQ")).config
    assert dlq.subjects == ["sandbus.dlq.>"] and dlq.max_age == 14 * 86400


async def test_ensure_bus_is_idempotent_also_when_services_race(nats_url: str) -> None:
    clients = [await nats.connect(nats_url) for _ in range(3)]
    try:
        reports = await asyncio.gather(*(ensure_bus(c.jetstream()) for c in clients))
        assert all(set(report) == set(STREAMS) for report in reports)
        again = await ensure_bus(clients[0].jetstream())
        assert again == dict.fromkeys(STREAMS, "unchanged")
    finally:
        for client in clients:
            await client.close()


async def test_ensure_bus_updates_a_changed_config(js: JetStreamContext) -> None:
    await ensure_bus(js)
    changed = BusConfig(event_log_max_age=3600, duplicate_window=60, dead_letter_max_bytes=1 << 20)
    report = await ensure_bus(js, changed)
    assert report == dict.fromkeys(STREAMS, "updated"), "the duplicate window is on every stream"
    events = (await js.stream_info("SANDBUS_EVENTS")).config
    assert (events.max_age, events.duplicate_window) == (3600, 60)
    assert (await js.stream_info("SANDBUS_DLQ")).config.max_bytes == 1 << 20
    assert await ensure_bus(js, changed) == dict.fromkeys(STREAMS, "unchanged")


async def test_ensure_bus_names_a_change_jetstream_cannot_make(js: JetStreamContext) -> None:
    await ensure_bus(js)
    with pytest.raises(BusProvisioningError, match=r"SANDBUS_EVENTS \(storage\)"):
        await ensure_bus(js, BusConfig(storage="memory"))


async def test_ensure_bus_reports_a_stream_that_overlaps_ours(js: JetStreamContext) -> None:
    await js.add_stream(name="SQUATTER", subjects=["sandbus.events.>"])
    with pytest.raises(BusProvisioningError, match="cannot create stream SANDBUS_EVENTS"):
        await ensure_bus(js)


class _LateLookup:
    """A JetStream context whose first stream lookup misses, as when another service creates
    the stream between our lookup and our create."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._missed: set[str] = set()

    def __getattr__(self, name: str) -> object:
        return getattr(self._js, name)

    async def stream_info(self, name: str) -> object:
        if name not in self._missed:
            self._missed.add(name)
            raise NotFoundError
        return await self._js.stream_info(name)


async def test_ensure_bus_converges_on_a_stream_created_by_a_racing_service(
    js: JetStreamContext,
) -> None:
    await ensure_bus(js, BusConfig(event_log_max_age=3600))
    report = await ensure_bus(_LateLookup(js), BusConfig())  # type: ignore[arg-type]
    assert report["SANDBUS_EVENTS"] == "updated"
    assert (await js.stream_info("SANDBUS_EVENTS")).config.max_age == 7 * 86400


def test_bus_config_rejects_inconsistent_limits() -> None:
    with pytest.raises(ValueError, match="duplicate_window"):
        BusConfig(duplicate_window=7200, event_log_max_age=3600)
    with pytest.raises(ValueError, match="must differ"):
        BusConfig(state_stream="SANDBUS_EVENTS")
    with pytest.raises(ValueError, match=r"replicas must be 1\.\.5"):
        BusConfig(replicas=0)
    with pytest.raises(ValueError, match="dead_letter_max_age must be positive"):
        BusConfig(dead_letter_max_age=0)
    with pytest.raises(msgspec.ValidationError, match="storage"):
        msgspec.convert({"storage": "tape"}, BusConfig)


# --- the event log -----------------------------------------------------------------------


async def test_the_same_event_published_twice_is_stored_once(bus: JetStreamContext) -> None:
    event = observed_event("added", sandbox(), time=NOW, traceparent=TRACEPARENT)
    first = await publish_event(bus, event)
    second = await publish_event(bus, event)
    assert not first.duplicate and second.duplicate
    assert second.seq == first.seq
    newer = observed_event("modified", sandbox(resource_version="43"), time=NOW)
    assert not (await publish_event(bus, newer)).duplicate

    info = await bus.stream_info("SANDBUS_EVENTS")
    assert info.state.messages == 2
    stored = await bus.get_msg("SANDBUS_EVENTS", seq=first.seq)
    assert stored.subject == event_subject("Sandbox", "default", "my.app")
    assert stored.headers is not None
    assert stored.headers[MSG_ID] == event.id
    assert stored.headers["traceparent"] == TRACEPARENT
    assert decode_event(stored.data or b"") == event


async def test_decisions_share_the_event_log(bus: JetStreamContext) -> None:
    ack = await publish_event(bus, a_decision())
    assert ack.stream == "SANDBUS_EVENTS"


async def test_publishing_without_a_provisioned_bus_fails_loudly(js: JetStreamContext) -> None:
    with pytest.raises(NoStreamResponseError):
        await publish_event(js, observed_event("added", sandbox(), time=NOW), ack_timeout=2)


# --- the warm queue ----------------------------------------------------------------------


async def test_a_sandbox_is_queued_once_until_its_entry_is_acked(bus: JetStreamContext) -> None:
    entry = a_warm_entry()
    assert await enqueue_warm(bus, entry) is True
    assert await enqueue_warm(bus, entry) is False, "refused with 10077: already queued"

    subscription = await bus.pull_subscribe(
        warm_queue_filter("default", "abc123", "python", "n-1"),
        durable=warm_consumer_name("default", "abc123", "python", "n-1"),
        stream="SANDBUS_WARM",
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=30),
    )
    [taken] = await subscription.fetch(1, timeout=5)
    assert decode_event(taken.data) == entry
    assert await enqueue_warm(bus, entry) is False, "still queued while unacked"
    await taken.ack_sync()
    assert await enqueue_warm(bus, entry) is True, "queued again once the ack is confirmed"


# --- the state table ---------------------------------------------------------------------


async def test_the_state_table_keeps_the_latest_event_per_object(bus: JetStreamContext) -> None:
    """Copied by the server from the event log, each with the log sequence it came from."""
    subject = state_subject("Sandbox", "default", "my.app")
    acks = [
        await publish_event(
            bus, observed_event("modified", sandbox(resource_version=version), time=NOW)
        )
        for version in ("42", "43", "44")
    ]
    await publish_event(bus, a_decision())  # history, not state: not copied
    await publish_event(bus, observed_event("added", sandbox(name="other"), time=NOW))
    await state_table_copied(bus, 2)
    assert (await bus.stream_info("SANDBUS_STATE")).state.messages == 2
    latest = await bus.get_last_msg("SANDBUS_STATE", subject, direct=True)
    assert decode_event(latest.data or b"").id.endswith(":44:modified")
    assert source_sequence(latest.headers) == acks[-1].seq


async def test_nothing_but_the_event_log_writes_the_state_table(bus: JetStreamContext) -> None:
    with pytest.raises(NoStreamResponseError):
        await bus.publish(
            state_subject("Sandbox", "default", "my.app"),
            encode_event(observed_event("added", sandbox(), time=NOW)),
            timeout=2,
        )


async def test_a_state_table_written_by_an_older_watcher_is_derived_from_then_on(
    js: JetStreamContext,
) -> None:
    """An older sandbus wrote the state table itself: it keeps what it holds, and the server
    copies only what the log gets from then on, not the log's older states over it."""
    await js.add_stream(
        StreamConfig(
            name="SANDBUS_STATE",
            subjects=["sandbus.state.>"],
            max_msgs_per_subject=1,
            allow_direct=True,
            allow_msg_ttl=True,
        )
    )
    subject = state_subject("Sandbox", "default", "my.app")
    newest = observed_event("modified", sandbox(resource_version="2"), time=NOW)
    await js.publish(subject, encode_event(newest), stream="SANDBUS_STATE")
    [event_log] = [c for c in stream_configs(BusConfig()) if c.name == "SANDBUS_EVENTS"]
    await js.add_stream(event_log)
    await publish_event(js, observed_event("added", sandbox(resource_version="1"), time=NOW))

    assert (await ensure_bus(js))["SANDBUS_STATE"] == "updated"
    await publish_event(js, observed_event("added", sandbox(name="later"), time=NOW))
    await state_table_copied(js, 2)
    latest = await js.get_last_msg("SANDBUS_STATE", subject, direct=True)
    assert decode_event(latest.data or b"") == newest, "not replaced by the log's older state"
    assert (await js.stream_info("SANDBUS_STATE")).state.messages == 2
    assert await ensure_bus(js) == dict.fromkeys(STREAMS, "unchanged")


# --- dead letters ------------------------------------------------------------------------


async def test_garbage_on_an_event_subject_is_dead_lettered_once(bus: JetStreamContext) -> None:
    garbage = b'{"specversion": "1.0", "type": "io.sandbus.object.added.v1", "id": 7}'
    subject = event_subject("Sandbox", "default", "my.app")
    await bus.publish(subject, garbage)
    reader = await bus.pull_subscribe(event_filter(), durable="reader", stream="SANDBUS_EVENTS")
    [msg] = await reader.fetch(1, timeout=5)
    with pytest.raises(EventDecodeError) as caught:
        decode_event(msg.data)

    first = await dead_letter(bus, msg, reason=str(caught.value), rejected_by="test-consumer")
    again = await dead_letter(bus, msg, reason=str(caught.value), rejected_by="test-consumer")
    await msg.ack()
    assert not first.duplicate and again.duplicate, "a redelivered message is dead-lettered once"

    stored = await bus.get_msg("SANDBUS_DLQ", seq=first.seq)
    assert stored.subject == "sandbus.dlq.events.sandbox.default.my_app"
    assert stored.data == garbage
    assert stored.headers is not None
    assert stored.headers[DLQ_REASON] == "attribute `id`: Expected `str`, got `int`"
    assert stored.headers[DLQ_SUBJECT] == subject
    assert stored.headers[DLQ_REJECTED_BY] == "test-consumer"


# --- an outside subscriber ---------------------------------------------------------------

EXTERNAL_SUBSCRIBER = textwrap.dedent(
    """
    import asyncio, json, pathlib, sys

    import jsonschema
    import nats

    async def main(url, schemas):
        nc = await nats.connect(url)
        subscription = await nc.jetstream().subscribe("sandbus.events.>", ordered_consumer=True)
        msg = await subscription.next_msg(timeout=10)
        event = json.loads(msg.data)
        schema = json.loads((pathlib.Path(schemas) / (event["type"] + ".json")).read_text())
        jsonschema.Draft202012Validator(schema).validate(event)
        await nc.close()
        assert not any(m == "events" or m.startswith("events.") for m in sys.modules)
        print(json.dumps({"subject": msg.subject, "id": event["id"], "name": event["name"],
                          "msg_id": msg.headers.get("Nats-Msg-Id")}))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_an_outside_subscriber_decodes_events_with_only_the_json_schema(
    bus: JetStreamContext, nats_url: str, tmp_path: Path
) -> None:
    event = observed_event("added", sandbox(name="web.v2"), time=NOW, traceparent=TRACEPARENT)
    await publish_event(bus, event)
    script = tmp_path / "subscriber.py"
    script.write_text(EXTERNAL_SUBSCRIBER)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",  # isolated: no cwd or PYTHONPATH on sys.path; the script asserts `events` unused
        str(script),
        nats_url,
        str(SCHEMAS),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
    assert json.loads(stdout) == {
        "subject": "sandbus.events.sandbox.default.web_v2",
        "id": event.id,
        "name": "web.v2",
        "msg_id": event.id,
    }

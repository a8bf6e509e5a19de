"""Reading a stream to its end against a real nats-server: filters, starts, the latest message
per subject, an end that does not move, and nothing left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from services.runtime.streams import read_to_end

STREAM = "READ_TEST"


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_url)
    stream = nc.jetstream()
    await stream.add_stream(name=STREAM, subjects=["t.>"])
    for index in range(5):
        for subject in ("t.a", "t.b", "t.c"):
            await stream.publish(subject, f"{subject}:{index}".encode(), stream=STREAM)
    yield stream
    await nc.close()


async def read(js: JetStreamContext, filters: list[str], **options: Any) -> list[str]:
    return [msg.data.decode() async for msg in read_to_end(js, STREAM, filters, batch=4, **options)]


async def test_every_message_under_several_filters_in_stream_order(js: JetStreamContext) -> None:
    got = await read(js, ["t.a", "t.c"])
    assert got == [f"t.{s}:{i}" for i in range(5) for s in "ac"]


async def test_the_latest_message_per_subject(js: JetStreamContext) -> None:
    got = await read(js, ["t.>"], deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
    assert sorted(got) == ["t.a:4", "t.b:4", "t.c:4"]


async def test_from_a_sequence_and_up_to_another(js: JetStreamContext) -> None:
    assert await read(js, ["t.>"], start_seq=13) == ["t.a:4", "t.b:4", "t.c:4"]
    assert await read(js, ["t.b"], until_seq=8) == ["t.b:0", "t.b:1", "t.b:2"]


async def test_nothing_to_read_ends_at_once_and_no_consumer_is_left(js: JetStreamContext) -> None:
    assert await read(js, ["t.nothing"]) == []
    assert await read(js, ["t.>"], start_seq=100) == []
    await read(js, ["t.a"])
    assert (await js.stream_info(STREAM)).state.consumer_count == 0


async def test_a_new_only_read_is_refused(js: JetStreamContext) -> None:
    with pytest.raises(ValueError, match="cannot start"):
        await read(js, ["t.>"], deliver_policy=DeliverPolicy.NEW)

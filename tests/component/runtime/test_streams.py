"""Reading a stream to its end against a real nats-server: filters, starts, the latest message
per subject, an end that does not move, and nothing left behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from services.runtime.streams import push_to_end, read_to_end

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


# --- pushed to a callback -----------------------------------------------------------------


async def pushed(js: JetStreamContext, filters: list[str], **options: Any) -> list[str]:
    got: list[str] = []

    async def handle(msg: Any) -> None:
        got.append(msg.data.decode())

    count = await push_to_end(js, STREAM, filters, handle, **options)
    assert count == len(got)
    return got


async def test_pushed_reads_match_pulled_ones(js: JetStreamContext) -> None:
    assert await pushed(js, ["t.a", "t.c"]) == await read(js, ["t.a", "t.c"])
    last = await pushed(js, ["t.>"], deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
    assert last == ["t.a:4", "t.b:4", "t.c:4"]
    assert await pushed(js, ["t.nothing"]) == []
    info = await js.stream_info(STREAM)
    assert info.state.consumer_count == 0, "each read removes its consumer"


async def test_a_large_read_is_flow_controlled_and_complete(js: JetStreamContext) -> None:
    """More bytes than the server pushes without flow control: nothing is lost, and the end is
    found however slowly the handler goes."""
    payload = b"x" * 2048
    for index in range(3000):
        await js.publish(f"t.big.{index}", payload, stream=STREAM)
    seen: list[int] = []

    async def slow(msg: Any) -> None:
        seen.append(int(msg.subject.rsplit(".", 1)[1]))
        if len(seen) % 500 == 0:
            await asyncio.sleep(0.05)

    assert await push_to_end(js, STREAM, ["t.big.>"], slow) == 3000
    assert seen == list(range(3000))


async def test_a_handler_that_fails_stops_the_read_with_its_error(js: JetStreamContext) -> None:
    async def broken(msg: Any) -> None:
        raise ValueError("cannot use it")

    with pytest.raises(ValueError, match="cannot use it"):
        await push_to_end(js, STREAM, ["t.a"], broken)

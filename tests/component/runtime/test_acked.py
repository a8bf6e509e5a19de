"""JetStream publishes acknowledged without nats-py's request path (services/runtime/acked.py),
against a real nats-server: they answer what ``JetStreamContext.publish`` answers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig
from nats.js.errors import APIError, NoStreamResponseError

from devtools.natsd import NatsServer
from services.runtime.acked import AckedPublisher


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_url)
    await connection.jetstream().add_stream(StreamConfig(name="S", subjects=["s.>"]))
    yield connection
    await connection.close()


async def test_an_acknowledgement_says_where_the_message_went(nc: Client) -> None:
    subscriptions = len(nc._subs)
    acked = AckedPublisher(nc)
    first = await acked.publish("s.a", b"1", timeout=5, stream="S", headers={"Nats-Msg-Id": "x"})
    again = await acked.publish("s.a", b"1", timeout=5, headers={"Nats-Msg-Id": "x"})
    other = await acked.publish("s.b", b"2", timeout=5, headers={"Trace": "t"})
    assert (first.stream, first.seq, first.duplicate) == ("S", 1, None)
    assert (again.seq, again.duplicate) == (1, True), "deduplicated by its id"
    assert other.seq == 2
    stored = await nc.jetstream().get_msg("S", 2)
    assert stored.headers is not None and stored.headers["Trace"] == "t"
    await acked.close()
    assert len(nc._subs) == subscriptions, "closed, it takes no more answers"


async def test_a_refusal_is_the_api_error_of_the_server_s_code(nc: Client) -> None:
    acked = AckedPublisher(nc)
    await acked.publish("s.a", b"1", timeout=5)
    with pytest.raises(APIError) as refused:
        await acked.publish(
            "s.a", b"2", timeout=5, headers={"Nats-Expected-Last-Subject-Sequence": "7"}
        )
    assert refused.value.err_code == 10071, "the fence: wrong last sequence"
    with pytest.raises(APIError) as elsewhere:
        await acked.publish("s.a", b"3", timeout=5, stream="OTHER")
    assert elsewhere.value.code == 400
    with pytest.raises(NoStreamResponseError):
        await acked.publish("nowhere.a", b"4", timeout=5)


async def test_no_answer_within_the_timeout_is_a_timeout(tmp_path: object) -> None:
    """NATS gone after the send: the publish waits ``timeout`` and raises nats-py's
    TimeoutError, which the watcher retries (services/watcher/streams.py)."""
    server = NatsServer(store_dir=tmp_path / "nats")  # type: ignore[operator]
    server.start()
    client = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        await client.jetstream().add_stream(StreamConfig(name="S", subjects=["s.>"]))
        acked = AckedPublisher(client)
        await acked.publish("s.a", b"1", timeout=5)
        server.close()
        with pytest.raises(nats.errors.TimeoutError):
            await acked.publish("s.a", b"2", timeout=0.3)
        assert not acked._waiting, "nothing left waiting"
    finally:
        await client.close()

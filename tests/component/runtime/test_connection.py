"""``connect_nats`` against a real nats-server that is stopped and started: a service reconnects
for as long as it takes, or, with a budget, learns that the connection is gone for good."""

from __future__ import annotations

import asyncio
import time

import pytest

from devtools.natsd import NatsServer
from services.runtime.connection import (
    ConnectionLost,
    connect_nats,
    reconnect_budget,
)


async def test_a_connection_comes_back_after_the_server_restarts(nats_server: NatsServer) -> None:
    connection = await connect_nats(nats_server.url, name="test", reconnect_wait=0.2)
    lost = asyncio.create_task(connection.lost())
    try:
        await connection.js.add_stream(name="S", subjects=["s.>"])
        await asyncio.to_thread(nats_server.stop)
        await asyncio.sleep(1.5)  # several reconnect attempts fail meanwhile
        await asyncio.to_thread(nats_server.start)
        async with asyncio.timeout(20):
            while True:
                try:
                    ack = await connection.js.publish("s.x", b"after", timeout=1)
                    break
                except Exception:
                    await asyncio.sleep(0.1)
        assert ack.stream == "S"
        assert not lost.done(), "an outage that ends is not a loss"
    finally:
        lost.cancel()
        await connection.close()


async def test_a_connection_down_longer_than_its_budget_is_lost(nats_server: NatsServer) -> None:
    connection = await connect_nats(nats_server.url, name="test", budget=1.0, reconnect_wait=0.2)
    try:
        await asyncio.to_thread(nats_server.stop)
        started = time.monotonic()
        with pytest.raises(ConnectionLost, match="unreachable for more than 1 s"):
            async with asyncio.timeout(15):
                await connection.lost()
        assert time.monotonic() - started >= 0.9
        assert connection.client.is_closed
    finally:
        await connection.close()


async def test_no_server_within_the_budget_fails_the_first_connection(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    await asyncio.to_thread(nats_server.stop)
    with pytest.raises(ConnectionLost, match=r"did not answer within 0\.5 s"):
        async with asyncio.timeout(15):
            await connect_nats(url, name="test", budget=0.5, reconnect_wait=0.1)


async def test_a_clean_close_is_not_a_loss(nats_server: NatsServer) -> None:
    connection = await connect_nats(nats_server.url, name="test")
    lost = asyncio.create_task(connection.lost())
    await connection.close()
    with pytest.raises(ConnectionLost, match="was closed"):
        await lost  # whoever waits is told, but nothing was logged as a failure


@pytest.mark.parametrize(("value", "seconds"), [(None, None), ("", None), ("2.5", 2.5)])
def test_the_budget_setting_is_seconds_or_for_ever(
    value: str | None, seconds: float | None
) -> None:
    assert reconnect_budget(value) == seconds


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_budget_that_is_not_seconds_stops_the_service(value: str) -> None:
    with pytest.raises(ValueError, match="SANDBUS_NATS_RECONNECT_BUDGET"):
        reconnect_budget(value)

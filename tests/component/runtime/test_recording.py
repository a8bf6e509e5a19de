"""A worker's decisions reach the event log without the pass waiting for the bus, against a
real nats-server: taken, deduplicated, counted when acknowledged, and said aloud when the bus
refuses them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client

from events.codec import decode_event
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.reconcile.recording import Recorder
from tests.support.waiting import until
from tests.unit.events.samples import NOW, a_decision


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await nats.connect(nats_url)
    try:
        yield client
    finally:
        await client.close()


async def test_a_decision_lands_on_the_log_once_and_is_counted_when_acknowledged(
    nc: Client,
) -> None:
    js = nc.jetstream()
    bus = BusConfig()
    await ensure_bus(js, bus)
    recorder = Recorder(js, bus, worker="claim", ack_timeout=5.0)
    decision = a_decision().data
    await recorder.record(decision, NOW, {})
    await recorder.record(decision, NOW, {})  # the same pass again: one entry on the log
    await until(lambda: recorder.published == 2, within=5)
    info = await js.stream_info(bus.event_log_stream)
    assert info.state.messages == 1
    stored = await js.get_msg(bus.event_log_stream, info.state.last_seq)
    assert stored.data is not None and decode_event(stored.data).data == decision


async def test_a_decision_the_bus_refuses_is_said_aloud_and_not_counted(
    nc: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """No event log (the bus not provisioned): the pass goes on, and the log says why the
    decision is not recorded."""
    recorder = Recorder(nc.jetstream(), BusConfig(), worker="claim", ack_timeout=5.0)
    with caplog.at_level(logging.WARNING):
        await recorder.record(a_decision().data, NOW, {})
        await until(lambda: "could not record" in caplog.text, within=5)
    assert recorder.published == 0


class SilentJetStream:
    """Takes every publish and never answers (a bus that went away after the send)."""

    def __init__(self) -> None:
        self.answers: list[asyncio.Future[object]] = []

    async def publish_async(self, *_: object, **__: object) -> asyncio.Future[object]:
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.answers.append(answer)
        return answer


async def test_a_decision_never_answered_is_given_up_after_the_ack_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    js = SilentJetStream()
    recorder = Recorder(js, BusConfig(), worker="claim", ack_timeout=0.05)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        await recorder.record(a_decision().data, NOW, {})
        await until(lambda: "no answer from the bus within 0.05s" in caplog.text, within=5)
    [answer] = js.answers
    assert answer.cancelled(), "its slot among the pending publishes is given back"
    assert recorder.published == 0

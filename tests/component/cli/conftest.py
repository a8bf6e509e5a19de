"""Fixtures for the history commands against a real nats-server with the bus provisioned; the
commands and the publishing helpers the tests share are in commands.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from services.runtime.bus import ensure_bus


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await nats.connect(nats_url)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def js(nc: Client) -> JetStreamContext:
    context = nc.jetstream()
    await ensure_bus(context)
    return context

"""The sandbox worker against the real thing: a nats-server, the development cluster with its
simulated kubelet and garbage collector, and the watcher, all in this process.

The stack and the helpers that start it live in :mod:`tests.support.stack`; tests wait for what
they expect with :func:`tests.support.waiting.until`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.stack import Stack, running_stack


@pytest.fixture
async def stack(nats_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(nats_url, tmp_path) as running:
        yield running

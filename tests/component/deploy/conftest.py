"""Fixtures for the tests of the deployment's NATS: a real nats-server started with
deploy/base/nats/nats.conf (``secured_nats``), and connections to it as one user or another
(``connect``). The server and the client are in securednats.py.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from tests.component.deploy.securednats import (
    READER_INBOX_PREFIX,
    Client,
    SecuredNats,
    start_server,
    stop_server,
)
from tests.unit.deploy.manifests import example_password_variables


@pytest.fixture
def secured_nats(tmp_path: Path) -> Iterator[SecuredNats]:
    passwords = {variable: secrets.token_hex(16) for variable in example_password_variables()}
    process, port, log = start_server(tmp_path, passwords)
    try:
        yield SecuredNats(port=port, passwords=passwords, log=log, pid_file=tmp_path / "nats.pid")
    finally:
        stop_server(process)


@pytest.fixture
async def connect(secured_nats: SecuredNats) -> AsyncIterator[Any]:
    """``await connect(user)`` → a :class:`Client`; every connection is closed afterwards."""
    clients: list[Client] = []

    async def _connect(user: str, **options: Any) -> Client:
        client = Client(nc=NatsClient())

        async def record(error: Exception) -> None:
            client.violations.append(str(error))

        if user == "reader":
            options.setdefault("inbox_prefix", READER_INBOX_PREFIX)
        await client.nc.connect(
            secured_nats.url(user),
            error_cb=record,
            allow_reconnect=False,
            connect_timeout=5,
            **options,
        )
        clients.append(client)
        return client

    try:
        yield _connect
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.nc.close()

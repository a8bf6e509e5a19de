"""The fixtures every watcher test shares, component and end to end: a quiet development cluster,
a client of it, the record of its changes, and a NATS connection that rides out server restarts.
Each conftest that wants them imports them (pytest registers a fixture a conftest imports)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.cluster import DevCluster
from devtools.natsd import NatsServer
from tests.component.watcher.harness import (
    ClusterHistory,
    api_client,
    quiet_cluster,
    record_history,
)

__all__ = ["client", "cluster", "history", "nc"]


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with quiet_cluster() as running:
        yield running


@pytest.fixture
def history(cluster: DevCluster) -> ClusterHistory:
    return record_history(cluster)


@pytest.fixture
async def client(cluster: DevCluster, tmp_path: Path) -> AsyncIterator[k8s.ApiClient]:
    async with api_client(cluster, tmp_path) as api:
        yield api


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_server.url, max_reconnect_attempts=-1)
    yield connection
    await connection.close()

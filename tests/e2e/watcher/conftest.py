"""Fixtures for the watcher's end-to-end tests: a development cluster in this process, a real
nats-server, and ``sandbus run watcher`` processes that are always killed at teardown.

The cluster, its client, its history and the NATS connection are the component tests' fixtures
(tests/component/watcher/conftest.py), declared again here: a conftest is not imported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
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
from tests.e2e.watcher.processes import LEASE_SECONDS, WatcherProcess


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


@pytest.fixture
def start_watcher(
    cluster: DevCluster, client: k8s.ApiClient, nats_server: NatsServer, tmp_path: Path
) -> Iterator[Callable[[str], WatcherProcess]]:
    """Start a ``sandbus run watcher`` process with the given identity."""
    assert cluster.kubeconfig_path is not None  # written by the client fixture
    started: list[WatcherProcess] = []

    def start(identity: str) -> WatcherProcess:
        process = WatcherProcess(
            identity,
            nats_url=nats_server.url,
            kubeconfig=cluster.kubeconfig_path,  # type: ignore[arg-type]
            log_dir=tmp_path,
            lease_seconds=LEASE_SECONDS,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()

"""Fixtures for the watcher's end-to-end tests: a development cluster in this process, a real
nats-server, and ``sandbus run watcher`` processes that are always killed at teardown.

The cluster, its client, its history and the NATS connection are the component tests' fixtures
(tests/component/watcher/fixtures.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from devtools.natsd import NatsServer
from tests.component.watcher.fixtures import client, cluster, history, nc
from tests.e2e.watcher.processes import LEASE_SECONDS, WatcherProcess

__all__ = ["client", "cluster", "history", "nc", "start_watcher"]


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

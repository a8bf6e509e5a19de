"""SIGTERM stops ``sandbus run watcher`` with exit code 0 within a bound, whatever it is doing.

Kubernetes stops a Pod with SIGTERM and kills it after the grace period; a watcher that does
not exit in time loses its clean Lease release and counts as failed. Each moment gets a fresh
process: waiting for NATS at start-up, standing by while another replica leads, just elected,
publishing a burst, and leading while NATS is down with publishes pending.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.cluster import DevCluster
from devtools.natsd import NatsServer
from tests.component.watcher.harness import burst, event_log, wait_publishing
from tests.e2e.watcher.processes import WatcherProcess, lease_holder
from tests.support.waiting import until

pytestmark = pytest.mark.slow

BOUND = 5.0
"""Seconds from SIGTERM to exit; well inside Kubernetes' default grace period of 30 s."""


async def _terminate(process: WatcherProcess) -> float:
    """SIGTERM ``process``; return how long it took to exit, after checking it exited 0."""
    started = time.monotonic()
    code = await asyncio.to_thread(process.terminate, BOUND)
    took = time.monotonic() - started
    assert code == 0, f"{process.identity} exited {code}:\n{process.log()[-3000:]}"
    return took


async def _logged(process: WatcherProcess, text: str) -> None:
    async def found() -> bool:
        assert process.alive, process.log()[-3000:]
        return text in process.log()

    await until(found, within=20.0, interval=0.05)


async def _leads(cluster: DevCluster, process: WatcherProcess) -> None:
    async def leading() -> bool:
        assert process.alive, process.log()[-3000:]
        return lease_holder(cluster) == process.identity

    await until(leading, within=20.0, interval=0.05)


async def test_sigterm_stops_the_watcher_promptly_at_every_moment(
    cluster: DevCluster,
    client: k8s.ApiClient,
    nc: Client,
    nats_server: NatsServer,
    start_watcher: Callable[[str], WatcherProcess],
) -> None:
    took: dict[str, float] = {}

    # Waiting for NATS at start-up.
    await asyncio.to_thread(nats_server.stop)
    waiting = start_watcher("waiting")
    await _logged(waiting, "cannot connect to NATS")
    took["waiting for NATS"] = await _terminate(waiting)
    await asyncio.to_thread(nats_server.start)

    # A standby, while another replica leads; then that leader, just after its election.
    leader = start_watcher("leader")
    await _leads(cluster, leader)
    standby = start_watcher("standby")
    await _logged(standby, "standby")
    took["standby"] = await _terminate(standby)
    took["just elected"] = await _terminate(leader)
    assert "released" in leader.log()

    # Publishing a burst.
    busy = start_watcher("busy")
    await _leads(cluster, busy)
    await wait_publishing(client, nc, "marker-busy")
    writes = asyncio.create_task(burst(client, 300, prefix="busy"))
    try:

        async def publishing() -> bool:
            return (
                sum(e.event.name.startswith("busy") for e in await event_log(nc.jetstream())) > 30
            )

        await until(publishing, within=20.0, interval=0.05)
        took["mid-burst"] = await _terminate(busy)
    finally:
        writes.cancel()
        await asyncio.wait({writes}, timeout=BOUND)

    # Leading while NATS is down, with changes waiting to be published.
    stranded = start_watcher("stranded")
    await _leads(cluster, stranded)
    await wait_publishing(client, nc, "marker-stranded")
    await asyncio.to_thread(nats_server.stop)
    await burst(client, 20, prefix="stranded")
    await _logged(stranded, "NATS disconnected")
    took["NATS down"] = await _terminate(stranded)
    await asyncio.to_thread(nats_server.start)

    assert max(took.values()) < BOUND, took

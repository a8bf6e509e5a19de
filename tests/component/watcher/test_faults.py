"""The watcher under faults, mid-burst: broken, closed, stalled and expired watches, a compacted
history, and NATS itself restarted. Nothing is lost, nothing is published twice, and each
object's events stay in order.

Where the watch resumes from its last resourceVersion (a broken, closed or stalled stream, or
NATS away), nothing can be collapsed: every commit must be on the log, exactly once. Where the
API server's history is gone (410), a relist can only see the latest state of what changed in
the gap, so intermediate states may collapse, but only into the next state of the same object.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.cluster import DevCluster
from devtools.natsd import NatsServer
from services.watcher.service import Watcher
from tests.component.watcher.harness import (
    ClusterHistory,
    api_client,
    assert_consistent,
    assert_exact,
    burst,
    quiet_cluster,
    running_watcher,
    wait_caught_up,
    wait_publishing,
    watcher_config,
)
from tests.support.waiting import until

KINDS = ["Sandbox"]


def sandbox_watch_stats(watcher: Watcher) -> Any:
    """The counters of the watch of Sandboxes in the watcher's current session."""
    assert watcher.session is not None
    return next(w.stats for w in watcher.session.watchers if w.resource.kind == "Sandbox")


async def test_a_broken_watch_stream_resumes_without_a_gap(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    async with running_watcher(nc, client, watcher_config()) as watcher:

        async def abort() -> None:
            assert cluster.faults.break_watches("abort", resource="sandboxes") == 1

        await burst(client, 1000, {400: abort})
        logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
        stats = sandbox_watch_stats(watcher)
    assert stats.broken >= 1 and stats.relists == 1
    assert_exact(history, logged, KINDS)


async def test_a_closed_watch_stream_resumes_without_a_gap(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    async with running_watcher(nc, client, watcher_config()) as watcher:

        async def close() -> None:
            assert cluster.faults.break_watches("close", resource="sandboxes") == 1

        await burst(client, 300, {120: close})
        logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
        stats = sandbox_watch_stats(watcher)
    assert stats.watches >= 2 and stats.relists == 1
    assert_exact(history, logged, KINDS)


async def test_a_stalled_watch_is_restarted_by_the_inactivity_watchdog(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    config = watcher_config(inactivity_limit=1.5)
    async with running_watcher(nc, client, config) as watcher:

        async def stall() -> None:
            assert cluster.faults.break_watches("stall", resource="sandboxes") == 1

        await burst(client, 200, {80: stall})
        logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
        stats = sandbox_watch_stats(watcher)
    assert stats.stalls >= 1 and stats.relists == 1
    assert_exact(history, logged, KINDS)


async def test_a_410_mid_burst_relists_and_publishes_only_real_changes(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    async with running_watcher(nc, client, watcher_config()) as watcher:

        async def expire() -> None:
            assert cluster.faults.break_watches("expire", resource="sandboxes") == 1

        await burst(client, 1000, {400: expire})
        logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
        stats = sandbox_watch_stats(watcher)
    assert stats.expired >= 1 and stats.relists >= 2
    assert watcher.stats.duplicates == 0
    assert_consistent(history, logged, KINDS)


async def test_a_compacted_history_makes_the_resume_a_relist(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    async with running_watcher(nc, client, watcher_config()) as watcher:

        async def stall() -> None:
            # The watch hangs, so the watcher falls behind the next writes...
            assert cluster.faults.break_watches("stall", resource="sandboxes") == 1

        async def compact_then_close() -> None:
            # ...which then leave the history, and the stream ends: the resume gets 410.
            cluster.faults.compact()
            cluster.faults.break_watches("close", resource="sandboxes")

        await burst(client, 300, {150: stall, 180: compact_then_close})
        logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
        stats = sandbox_watch_stats(watcher)
    assert stats.relists >= 2
    assert watcher.stats.duplicates == 0
    assert_consistent(history, logged, KINDS)


async def test_nats_restarted_mid_burst_loses_and_duplicates_nothing(
    cluster: DevCluster,
    client: k8s.ApiClient,
    nc: Client,
    history: ClusterHistory,
    nats_server: NatsServer,
) -> None:
    async with running_watcher(nc, client, watcher_config()) as watcher:
        restarted: list[asyncio.Task[None]] = []

        def stop_and_start() -> None:
            nats_server.stop()
            time.sleep(0.5)  # NATS stays down while the writes go on
            nats_server.start()

        async def restart_nats() -> None:
            restarted.append(asyncio.create_task(asyncio.to_thread(stop_and_start)))

        await burst(client, 1000, {400: restart_nats})
        await restarted[0]
        logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"], within=60.0)
    # The watcher's connection went down mid-burst; its publishes were buffered or retried.
    assert watcher.nc.stats["reconnects"] >= 1
    assert_exact(history, logged, KINDS)


async def test_an_api_server_restart_is_waited_out_and_nothing_is_published_twice(
    nc: Client, tmp_path: Path, unused_tcp_port: int
) -> None:
    def api_server() -> DevCluster:
        return quiet_cluster(port=unused_tcp_port, data_dir=tmp_path / "cluster")

    history = ClusterHistory()
    first = api_server()
    await first.start()
    first.store.subscribe(None, history.sink)
    try:
        async with (
            api_client(first, tmp_path) as client,
            running_watcher(nc, client, watcher_config()) as watcher,
        ):
            await burst(client, 100)
            await wait_caught_up(nc.jetstream(), history, KINDS)
            await first.stop()
            await asyncio.sleep(2.0)  # longer than the lease: the watcher must step down
            second = api_server()
            await second.start()
            second.store.subscribe(None, history.sink)
            try:

                async def back() -> bool:
                    # It lost the lease while the API server was away, took it back, and its
                    # new session relisted everything.
                    session = watcher.session
                    return watcher.sessions >= 2 and session is not None and session.ready.is_set()

                await until(back, within=20.0, interval=0.1)
                await burst(client, 100, seed=8, prefix="after")
                logged = await wait_caught_up(nc.jetstream(), history, KINDS)
            finally:
                await second.stop()
    finally:
        await first.stop()
    assert_exact(history, logged, KINDS)


async def test_a_watch_the_api_server_keeps_refusing_ends_in_a_relist(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    async with running_watcher(nc, client, watcher_config()) as watcher:
        await burst(client, 50)
        await wait_caught_up(nc.jetstream(), history, KINDS)
        cluster.faults.error(503, verb="watch", resource="sandboxes", count=3)
        cluster.faults.break_watches("close", resource="sandboxes")
        assert watcher.session is not None
        sandbox = next(w for w in watcher.session.watchers if w.resource.kind == "Sandbox")

        async def relisted() -> bool:
            return sandbox.stats.relists == 2 and sandbox.stats.errors == 3

        await until(relisted, within=20.0, interval=0.1)
        await wait_publishing(client, nc, "marker")
        await burst(client, 100, seed=8, prefix="after")
        logged = await wait_caught_up(nc.jetstream(), history, KINDS)
    assert_exact(history, logged, KINDS)

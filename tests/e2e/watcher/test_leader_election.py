"""Two ``sandbus run watcher`` replicas and one Lease: the leader is killed mid-burst, the standby
takes over within a few seconds, and the handover loses and duplicates nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.cluster import DevCluster
from tests.component.watcher.harness import (
    ClusterHistory,
    assert_consistent,
    burst,
    wait_caught_up,
    wait_publishing,
)
from tests.e2e.watcher.processes import LEASE_SECONDS, WatcherProcess, lease_holder, wait_holder
from tests.support.waiting import until

pytestmark = pytest.mark.slow


async def elected(cluster: DevCluster, replicas: dict[str, WatcherProcess]) -> str:
    async def someone() -> bool:
        return lease_holder(cluster) in replicas

    await until(someone, within=15.0, interval=0.05)
    return lease_holder(cluster)


async def test_the_standby_takes_over_from_a_killed_leader_and_nothing_is_lost_or_repeated(
    cluster: DevCluster,
    client: k8s.ApiClient,
    nc: Client,
    history: ClusterHistory,
    start_watcher: Callable[[str], WatcherProcess],
) -> None:
    replicas = {name: start_watcher(name) for name in ("red", "blue")}
    leader = await elected(cluster, replicas)
    standby = next(name for name in replicas if name != leader)
    await wait_publishing(client, nc, "marker-before")
    handover: dict[str, float] = {}

    async def kill_leader() -> None:
        replicas[leader].kill()
        handover["killed"] = time.monotonic()

        async def take_over() -> None:
            handover["taken"] = await wait_holder(cluster, standby)
            handover["ready"] = await wait_publishing(client, nc, "marker-after")

        handover_task.append(asyncio.create_task(take_over()))

    handover_task: list[asyncio.Task[None]] = []
    # The writes go on through the handover; the burst is paced so the leader is busy.
    await burst(client, 700, {250: kill_leader}, objects=50)
    await handover_task[0]
    # An object created and deleted during the handover was never seen: it has no event.
    gap = (handover["killed"] - 1.0, handover["ready"])
    logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"], within=40.0, gap=gap)

    took = handover["taken"] - handover["killed"]
    # The Lease expires after LEASE_SECONDS; "a few seconds" more is what a loaded machine adds.
    assert took < LEASE_SECONDS + 5.0, f"the standby took {took:.1f} s to take over"
    assert replicas[standby].alive, replicas[standby].log()
    assert_consistent(
        history,
        logged,
        ["Sandbox"],
        exact_before=handover["killed"] - 1.0,
        exact_after=handover["ready"],
    )


async def test_a_leader_stopped_cleanly_hands_over_at_once(
    cluster: DevCluster,
    client: k8s.ApiClient,
    nc: Client,
    history: ClusterHistory,
    start_watcher: Callable[[str], WatcherProcess],
) -> None:
    replicas = {name: start_watcher(name) for name in ("red", "blue")}
    leader = await elected(cluster, replicas)
    standby = next(name for name in replicas if name != leader)
    await wait_publishing(client, nc, "marker-before")

    stopped = time.monotonic()
    assert await asyncio.to_thread(replicas[leader].terminate) == 0
    # Released, not left to expire: the stopped leader's name is gone from the Lease at once.
    assert lease_holder(cluster) in ("", standby)
    await wait_holder(cluster, standby)
    await wait_publishing(client, nc, "marker-after")
    await burst(client, 100, objects=10)
    logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
    assert_consistent(history, logged, ["Sandbox"], exact_before=stopped, exact_after=stopped)

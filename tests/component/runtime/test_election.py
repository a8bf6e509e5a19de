"""The Lease election against the development cluster: one leader at a time, a standby that
takes over at once when the leader stops and after a lease duration when it dies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devtools.cluster import DevCluster
from events.envelope import ObjectKey
from services.runtime.election import LeaseElector
from services.runtime.kube import KubeApi
from services.runtime.lease import LeaseTimings, acquired_lease, holder_of
from tests.component.watcher.harness import api_client, quiet_cluster
from tests.support.waiting import until

NS = "default"
LEASE = "sandbus-test"
TIMINGS = LeaseTimings.for_duration(2.0)


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[KubeApi]:
    cluster: DevCluster
    async with quiet_cluster() as cluster, api_client(cluster, tmp_path) as client:
        yield KubeApi(client, request_timeout=1.0)


def elector(kube: KubeApi, identity: str) -> LeaseElector:
    return LeaseElector(kube, namespace=NS, name=LEASE, identity=identity, timings=TIMINGS)


async def holder(kube: KubeApi) -> str:
    return holder_of(await kube.get(ObjectKey("Lease", NS, LEASE)))


async def test_one_leads_the_other_stands_by_and_takes_over_when_it_stops(kube: KubeApi) -> None:
    first, second = elector(kube, "first"), elector(kube, "second")
    stop_first = asyncio.Event()

    async def run_first() -> None:
        async with first:
            await stop_first.wait()

    first_running = asyncio.create_task(run_first())
    async with asyncio.timeout(5):
        await first.wait_leading()
    async with second:

        async def standing_by() -> bool:
            return second.standing_by_for == "first"

        await until(standing_by, within=5.0, interval=0.05)
        assert first.is_leader() and not second.is_leader()

        stop_first.set()  # a clean stop: the Lease is released, not left to expire
        await first_running
        assert not first.is_leader()
        async with asyncio.timeout(TIMINGS.retry_period * 3):
            await second.wait_leading()
        assert await holder(kube) == "second"
    assert await holder(kube) == ""


async def test_a_dead_holder_is_taken_over_after_a_lease_duration(kube: KubeApi) -> None:
    dead = acquired_lease(
        None, namespace=NS, name=LEASE, identity="dead", now=datetime.now(UTC), timings=TIMINGS
    )
    await kube.create(dead)
    standby = elector(kube, "standby")
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with standby:
        async with asyncio.timeout(TIMINGS.duration * 4):
            await standby.wait_leading()
        waited = loop.time() - started
        assert waited >= TIMINGS.duration - TIMINGS.retry_period
        assert standby.transitions == 1
        lease = await kube.get(ObjectKey("Lease", NS, LEASE))
        assert lease["spec"]["leaseTransitions"] == 1
    assert await holder(kube) == ""


async def test_a_release_after_a_write_it_did_not_see_still_hands_the_lease_back(
    kube: KubeApi,
) -> None:
    """A stop that comes while a renewal of ours is in flight finds the Lease written since its
    last answer (409): it reads the Lease again and releases it while it is still ours; a Lease
    someone else took meanwhile is left to them."""
    for taken_by in ("me", "thief"):
        me = elector(kube, "me")
        async with me:
            async with asyncio.timeout(5):
                await me.wait_leading()
            stored = await kube.get(ObjectKey("Lease", NS, LEASE))
            stored["spec"]["holderIdentity"] = taken_by
            await kube.replace(stored)  # a write this replica never saw the answer of
        assert await holder(kube) == ("" if taken_by == "me" else "thief")
        await kube.delete(ObjectKey("Lease", NS, LEASE))

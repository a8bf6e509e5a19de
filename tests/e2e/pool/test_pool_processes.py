"""End to end: SandboxWarmPools through the watcher, the sandbox worker and the pool worker as
their own processes, on the development cluster, with the pool worker killed (SIGKILL) and
failed over in the middle of a fill.

What must hold (upstream #1215, a pool over-creating from a stale cache): with the cluster's
watch delivery slowed, so that the pool worker's view lags its own writes, a pool of 300 is
filled with exactly 300 creates, across a kill and restart of the pool worker, and across a
failover to its standby; the development cluster's record of every commit is the reference.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from services.runtime.lease import holder_of
from tests.e2e.services import log_tails, service
from tests.e2e.world import (
    Json,
    cluster_world,
    creates_of,
    members,
    pool_body,
    pool_status,
    ready_members,
    template_body,
)
from tests.support.samples import NS
from tests.support.waiting import until

pytestmark = pytest.mark.slow

SIZE = 300


async def lease_holder(kube: KubeApi, name: str) -> str | None:
    try:
        return holder_of(await kube.get(ObjectKey("Lease", NS, name))) or None
    except KubeError as error:
        if error.not_found:
            return None
        raise


POOL_ENV = {"SANDBUS_POOL_LEASE_SECONDS": "2"}


async def test_a_lagging_view_across_a_kill_and_a_restart_creates_exactly_the_pool(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path, watch_lag=(0.2, 0.5)) as (
        nats_server,
        _,
        kube,
        kubeconfig,
        history,
    ):
        url = nats_server.url

        def pool_replica(identity: str, log_name: str):  # type: ignore[no-untyped-def]
            return service(
                "pool",
                url,
                kubeconfig,
                logs,
                env={**POOL_ENV, "SANDBUS_IDENTITY": identity},
                log_name=log_name,
            )

        try:
            async with (
                service("watcher", url, kubeconfig, logs),
                service("sandbox", url, kubeconfig, logs),
            ):
                await kube.create(template_body())
                # A kill in the middle of the fill, then a restart.
                async with pool_replica("p1", "pool-1") as first:
                    # Replicas 0, then 300: the scale a user (or an HPA) makes.
                    await kube.create(pool_body("kill", 0))

                    async def seen_empty() -> bool:
                        return (await pool_status(kube, "kill")).get("observedGeneration") == 1

                    await until(seen_empty, within=60)
                    await kube.patch(
                        ObjectKey("SandboxWarmPool", NS, "kill"), {"spec": {"replicas": SIZE}}
                    )

                    async def some() -> bool:
                        return creates_of(history, "kill") >= 20

                    await until(some, within=60)
                    first.send_signal(signal.SIGKILL)
                    await first.wait()
                assert creates_of(history, "kill") < SIZE, "killed mid-fill"
                async with pool_replica("p2", "pool-2"):

                    async def full() -> bool:
                        return await ready_members(kube, "kill") == SIZE

                    await until(full, within=240, interval=1.0)
                    await asyncio.sleep(3)  # a late over-create would show by now
                    assert creates_of(history, "kill") == SIZE
                    status = await pool_status(kube, "kill")
                    assert (status.get("replicas"), status.get("readyReplicas")) == (SIZE, SIZE)

                    # Scale down: the newest go first.
                    newest_first = sorted(
                        await members(kube, "kill"),
                        key=lambda s: (s["metadata"]["creationTimestamp"], s["metadata"]["name"]),
                    )
                    await kube.patch(
                        ObjectKey("SandboxWarmPool", NS, "kill"), {"spec": {"replicas": 50}}
                    )

                    async def shrunk() -> bool:
                        return len(await members(kube, "kill")) == 50

                    await until(shrunk, within=120, interval=0.5)
                    kept = {s["metadata"]["name"] for s in await members(kube, "kill")}
                    oldest = [s["metadata"]["creationTimestamp"] for s in newest_first]
                    cutoff = oldest[49]
                    assert all(
                        s["metadata"]["creationTimestamp"] <= cutoff
                        for s in newest_first
                        if s["metadata"]["name"] in kept
                    ), "the oldest were kept"
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


async def test_the_standby_takes_over_mid_fill_and_creates_exactly_the_pool(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path, watch_lag=(0.2, 0.5)) as (
        nats_server,
        _,
        kube,
        kubeconfig,
        history,
    ):

        def pool_replica(identity: str):  # type: ignore[no-untyped-def]
            return service(
                "pool",
                nats_server.url,
                kubeconfig,
                logs,
                env={**POOL_ENV, "SANDBUS_IDENTITY": identity},
                log_name=f"pool-{identity}",
            )

        try:
            async with (
                service("watcher", nats_server.url, kubeconfig, logs),
                service("sandbox", nats_server.url, kubeconfig, logs),
                pool_replica("a") as a,
                pool_replica("b") as b,
            ):
                replicas = {"a": a, "b": b}
                leader = await until(lambda: lease_holder(kube, "sandbus-pool"), within=30)
                assert leader in replicas
                await kube.create(template_body())
                await kube.create(pool_body("failover", SIZE))

                async def some() -> bool:
                    return creates_of(history, "failover") >= 20

                await until(some, within=60)
                replicas[leader].send_signal(signal.SIGKILL)
                await replicas[leader].wait()
                assert creates_of(history, "failover") < SIZE, "killed mid-fill"

                standby = next(name for name in replicas if name != leader)

                async def taken_over() -> bool:
                    return await lease_holder(kube, "sandbus-pool") == standby

                await until(taken_over, within=30, interval=0.2)

                async def full() -> bool:
                    return await ready_members(kube, "failover") == SIZE

                await until(full, within=240, interval=1.0)
                await asyncio.sleep(3)  # a late over-create would show by now
                assert creates_of(history, "failover") == SIZE
                assert len(await members(kube, "failover")) == SIZE

                async def reported() -> Json:
                    status = await pool_status(kube, "failover")
                    return status if status.get("readyReplicas") == SIZE else {}

                status = await until(reported, within=30, interval=0.5)
                assert status.get("replicas") == SIZE
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None

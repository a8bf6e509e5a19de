"""End to end: the claim worker across restarts of NATS and of every service, with the watcher,
the sandbox, pool and claim workers as their own processes on the development cluster.

What must hold: claims created while NATS is down (the Kubernetes API still serves) all become
Ready once NATS is back on the same port and store, one-to-one, every queued member adopted
warm and the rest started cold, and the pool refills behind them with its queue matching it;
and the warm queues are durable on the bus: with every sandbus process stopped and NATS
restarted, the queue still holds the pool's entries before any service runs (nothing rebuilds
it from a relist), and claims made after the services return adopt exactly those members warm.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from services.runtime.kube import KubeApi
from tests.e2e.claim.harness import (
    CLAIM_ENV,
    bindings,
    claims_ready,
    create_claims,
    launch_types,
    not_ready,
    queue_depth,
    queue_matches_pool,
    recent_decisions,
    workers,
)
from tests.e2e.services import log_tails, service
from tests.e2e.world import cluster_world, members, pool_body, template_body
from tests.support.samples import NS
from tests.support.waiting import until

pytestmark = pytest.mark.slow

POOL = "warm"
SIZE = 20


async def member_names(kube: KubeApi, pool: str) -> set[str]:
    return {s["metadata"]["name"] for s in await members(kube, pool)}


async def warm_stream_state(url: str) -> tuple[int, int, int]:
    """(messages, first sequence, last sequence) of the warm stream."""
    connection = await nats.connect(url)
    try:
        state = (await connection.jetstream().stream_info("SANDBUS_WARM")).state
        return state.messages, state.first_seq, state.last_seq
    finally:
        await connection.close()


async def wait_ready(url: str, kube: KubeApi, names: list[str], within: float) -> None:
    try:
        await until(lambda: claims_ready(kube, set(names)), within=within, interval=0.2)
    except AssertionError as failure:
        stuck = await not_ready(kube, set(names))
        raise AssertionError(
            f"{failure}; not ready: {stuck[:20]}\n{await recent_decisions(url, stuck[:3])}"
        ) from None


@pytest.mark.timeout(240)
async def test_claims_waiting_through_a_nats_restart_complete_after_it_returns(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path) as (nats_server, _, kube, kubeconfig, _history):
        url = nats_server.url

        async def full() -> bool:
            return await queue_matches_pool(url, kube, POOL, SIZE)

        try:
            async with (
                workers(url, kubeconfig, logs),
                service("claim", url, kubeconfig, logs, env=CLAIM_ENV) as claim,
            ):
                await kube.create(template_body())
                await kube.create(pool_body(POOL, SIZE))
                await until(full, within=60, interval=0.25)
                queued = await member_names(kube, POOL)
                assert len(queued) == SIZE

                await asyncio.to_thread(nats_server.stop)
                names = [f"c{i:02d}" for i in range(30)]
                await create_claims(kube, names, POOL)  # the Kubernetes API still serves
                await asyncio.sleep(2)  # the watcher sees them, and cannot publish them
                assert not await claims_ready(kube, {names[0]}), "nothing served without NATS"
                await asyncio.to_thread(nats_server.start)  # same port, same store

                await wait_ready(url, kube, names, within=60)
                bound = await bindings(kube)
                assert set(bound) == set(names)
                adopted = set(bound.values())
                # Every entry that was queued went to a claim, none was lost in the outage.
                assert queued <= adopted, f"queued members not adopted: {queued - adopted}"
                kinds = await launch_types(kube, adopted)
                assert kinds["warm"] + kinds["cold"] == len(names), kinds
                # A claim woken late may find a member the pool queued meanwhile: at least the
                # queued ones are warm, and a claim starts cold only when the queue is dry.
                assert kinds["warm"] >= SIZE, kinds
                assert await launch_types(kube, queued) == {"warm": SIZE}
                await until(full, within=60, interval=0.25)  # replenished, and queued
                assert not await member_names(kube, POOL) & queued
                # The adopted and cold ones, and the pool's: no Sandbox more.
                assert len(await kube.list("Sandbox", NS)) == len(names) + SIZE
                assert claim.returncode is None
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


@pytest.mark.timeout(240)
async def test_every_service_restarted_finds_the_queues_intact_without_a_relist(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path) as (nats_server, _, kube, kubeconfig, _history):
        url = nats_server.url

        async def full() -> bool:
            return await queue_matches_pool(url, kube, POOL, SIZE)

        try:
            async with (
                workers(url, kubeconfig, logs),
                service("claim", url, kubeconfig, logs, env=CLAIM_ENV),
            ):
                await kube.create(template_body())
                await kube.create(pool_body(POOL, SIZE))
                await until(full, within=60, interval=0.25)
            # Every sandbus process has been stopped (SIGTERM) here.
            queued = await member_names(kube, POOL)
            assert len(queued) == SIZE
            before = await warm_stream_state(url)
            await asyncio.to_thread(nats_server.restart)  # same port, same store

            # No service runs: what the queue holds is what the bus kept, the very same entries.
            assert await queue_depth(url, POOL) == SIZE
            assert await warm_stream_state(url) == before

            async with (
                workers(url, kubeconfig, logs),
                service("claim", url, kubeconfig, logs, env=CLAIM_ENV),
            ):
                names = [f"r{i:02d}" for i in range(SIZE)]
                await create_claims(kube, names, POOL)
                await wait_ready(url, kube, names, within=60)
                bound = await bindings(kube)
                assert set(bound) == set(names)
                assert set(bound.values()) == queued, "the claims adopt the queued members"
                assert await launch_types(kube, queued) == {"warm": SIZE}
                await until(full, within=60, interval=0.25)
                assert len(await kube.list("Sandbox", NS)) == 2 * SIZE
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None

"""End to end: a replicated bus (three nats-servers as one JetStream cluster, every stream with
three replicas) loses a node while 500 claims are served by the watcher, the sandbox, pool and
claim workers as their own processes on the development cluster.

What must hold: no event lost (every commit of a claim or a Sandbox is on the event log once, in
commit order), no warm-queue entry lost (afterwards the queue holds exactly the pool's adoptable
members), every claim Ready with exactly one Sandbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import nats
import pytest

from api.keys import name_hash
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.natsd import NatsCluster
from events.subjects import warm_queue_filter
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.kube import KubeApi
from tests.component.watcher.harness import ClusterHistory, assert_exact, event_log
from tests.e2e.claim.harness import bindings, claim_body, claims_ready
from tests.e2e.services import log_tails, service
from tests.e2e.world import members, pool_body, ready_members, template_body
from tests.support.samples import NS
from tests.support.stack import FAST_KUBELET, api_client
from tests.support.waiting import until

pytestmark = pytest.mark.slow

CLAIMS = 500
POOL = 100
REPLICATED = {"SANDBUS_BUS_REPLICAS": "3", "SANDBUS_POOL_LEASE_SECONDS": "2"}


@asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[tuple[NatsCluster, KubeApi, Path, ClusterHistory]]:
    simulation = SimulationSettings(
        nodes=8, pod_ready_delay=0.05, options={"kubelet": dict(FAST_KUBELET)}
    )
    history = ClusterHistory()
    latency = LatencyModel(read=(0.0, 0.0), write=(0.0, 0.0), watch=(0.0, 0.0))
    async with (
        NatsCluster(3, store_dir=tmp_path / "nats") as bus,
        DevCluster(port=0, latency=latency, simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        cluster.store.subscribe(None, history.sink)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        yield bus, KubeApi(client, field_manager="e2e-test"), kubeconfig, history


async def queue_depth(url: str) -> int:
    connection = await nats.connect(url.split(","))
    try:
        info = await connection.jetstream().stream_info(
            "SANDBUS_WARM", subjects_filter=warm_queue_filter(NS, name_hash("tpl"), "warm")
        )
        return sum((info.state.subjects or {}).values())
    finally:
        await connection.close()


@pytest.mark.timeout(600)
async def test_a_node_lost_during_500_claims_loses_no_event_and_no_queue_entry(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    async with world(tmp_path) as (bus, kube, kubeconfig, history):
        url = bus.url
        connection = await nats.connect(url.split(","))
        report = await ensure_bus(connection.jetstream(), BusConfig(replicas=3))
        assert set(report.values()) == {"created"}
        info = await connection.jetstream().stream_info("SANDBUS_EVENTS")
        assert info.config.num_replicas == 3
        try:
            async with AsyncExitStack() as stack:
                for name in ("watcher", "sandbox", "pool", "claim"):
                    await stack.enter_async_context(
                        service(name, url, kubeconfig, logs, env=REPLICATED)
                    )
                await kube.create(template_body())
                await kube.create(pool_body("warm", POOL))

                async def full() -> bool:
                    ready = await ready_members(kube, "warm")
                    whole = ready == POOL == len(await members(kube, "warm"))
                    return whole and await queue_depth(url) == ready

                await until(full, within=180, interval=0.5)

                names = [f"c{i:03d}" for i in range(CLAIMS)]
                for wave in range(10):
                    batch = names[wave * 50 : (wave + 1) * 50]
                    await asyncio.gather(*(kube.create(claim_body(n, "warm")) for n in batch))
                    if wave == 3:
                        # The node that leads the event log's stream, so that the log itself
                        # must fail over.
                        leader = (
                            await connection.jetstream().stream_info("SANDBUS_EVENTS")
                        ).cluster
                        lost = next(
                            node
                            for node in bus.nodes
                            if node.server_name == (leader.leader if leader else None)
                        )
                        lost.kill()
                    await asyncio.sleep(0.5)
                await until(lambda: claims_ready(kube, set(names)), within=300, interval=0.5)
                bound = await bindings(kube)
                assert set(bound) == set(names)
                # The pool refills behind the claims, and every Ready member is queued again.
                await until(full, within=180, interval=0.5)
                logged = await event_log(connection.jetstream())
            kinds = ("SandboxClaim", "Sandbox")
            assert_exact(history, [e for e in logged if e.object_id[0] in kinds], kinds)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
        finally:
            await connection.close()

"""End to end: NATS stopped and started again on the same port and store, under the watcher, the
sandbox worker and the pool worker as their own processes; NATS gone for good under services
that were given a short reconnect budget; and services started while a NATS cluster's JetStream
has no quorum.

What must hold: after an outage every service serves again (Sandboxes created after NATS
returned become Ready, a pool created then fills); a service whose connection is gone for good
exits non-zero, so that Kubernetes restarts it, instead of staying alive doing nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.natsd import NatsCluster, NatsServer
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.kube import KubeApi
from tests.e2e.services import log_tails, service
from tests.support.samples import NS, condition, sandbox_body
from tests.support.stack import FAST_KUBELET, api_client
from tests.support.waiting import until

pytestmark = pytest.mark.slow

TEMPLATE = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxTemplate",
    "metadata": {"name": "tpl", "namespace": NS},
    "spec": {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "busybox"}]}}},
}
POOL = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxWarmPool",
    "metadata": {"name": "warm", "namespace": NS},
    "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "tpl"}},
}


async def ready(kube: KubeApi, names: list[str]) -> bool:
    found = {s["metadata"]["name"]: s for s in await kube.list("Sandbox", NS)}
    return all(condition(found.get(name)) == ("True", "DependenciesReady") for name in names)


async def pool_serving(logs: Path) -> bool:
    """The pool worker is connected and leading, not still starting: the outage is meant for a
    service that serves."""
    log = (logs / "pool.log").read_text()
    return "connected to NATS" in log and "leads default/sandbus-pool" in log


async def test_every_service_serves_again_after_nats_returns(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    simulation = SimulationSettings(pod_ready_delay=0.05, options={"kubelet": dict(FAST_KUBELET)})
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=LatencyModel.zero(), simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        kube = KubeApi(client, field_manager="e2e-test")
        try:
            async with (
                service("watcher", nats_server.url, kubeconfig, logs) as watcher,
                service("sandbox", nats_server.url, kubeconfig, logs) as worker,
                service("pool", nats_server.url, kubeconfig, logs) as pool,
            ):
                before = [f"before-{i}" for i in range(3)]
                for name in before:
                    await kube.create(sandbox_body(name))
                await until(lambda: ready(kube, before), within=60)
                await until(lambda: pool_serving(logs), within=60)

                await asyncio.to_thread(nats_server.stop)
                await asyncio.sleep(3)  # both services' reconnect attempts fail meanwhile
                await asyncio.to_thread(nats_server.start)

                after = [f"after-{i}" for i in range(5)]
                for name in after:
                    await kube.create(sandbox_body(name))
                await until(lambda: ready(kube, after), within=60, interval=0.2)
                await kube.create(TEMPLATE)
                await kube.create(POOL)

                async def pool_ready() -> bool:
                    members = [
                        s["metadata"]["name"]
                        for s in await kube.list("Sandbox", NS)
                        if s["metadata"]["name"].startswith("warm-")
                    ]
                    return len(members) == 2 and await ready(kube, members)

                await until(pool_ready, within=60, interval=0.2)
                assert all(p.returncode is None for p in (watcher, worker, pool))
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


async def test_a_service_whose_connection_is_gone_for_good_exits_non_zero(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    budget = {"SANDBUS_NATS_RECONNECT_BUDGET": "2"}
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=LatencyModel.zero()) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        kube = KubeApi(client, field_manager="e2e-test")
        try:
            async with (
                service("watcher", nats_server.url, kubeconfig, logs, env=budget) as watcher,
                service("sandbox", nats_server.url, kubeconfig, logs, env=budget) as worker,
                service("pool", nats_server.url, kubeconfig, logs, env=budget) as pool,
            ):
                # Serving first: a Sandbox reaches the sandbox worker through the watcher.
                await kube.create(sandbox_body("first", operatingMode="Suspended"))

                async def seen() -> bool:
                    found = await kube.list("Sandbox", NS)
                    return bool(found and found[0].get("status"))

                await until(seen, within=60)

                await until(lambda: pool_serving(logs), within=60)
                await asyncio.to_thread(nats_server.stop)
                async with asyncio.timeout(30):
                    codes = await asyncio.gather(watcher.wait(), worker.wait(), pool.wait())
                assert all(code not in (0, None) for code in codes), codes
            for name in ("watcher", "sandbox", "pool"):
                assert "NATS unreachable for more than 2 s" in (logs / f"{name}.log").read_text()
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


async def test_a_worker_started_while_jetstream_has_no_quorum_waits_for_it(
    tmp_path: Path,
) -> None:
    """NATS answers but its JetStream does not (one node of three, as while a cluster restarts):
    the worker waits to make its streams, as the watcher does, instead of exiting and being
    started again in a loop (found by the chaos soak, bench/soak.py)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    replicated = {"SANDBUS_BUS_REPLICAS": "3"}
    simulation = SimulationSettings(pod_ready_delay=0.05, options={"kubelet": dict(FAST_KUBELET)})
    async with (
        NatsCluster(3, store_dir=tmp_path / "nats") as bus,
        DevCluster(port=0, latency=LatencyModel.zero(), simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        connection = await nats.connect(bus.url.split(","))
        await ensure_bus(connection.jetstream(), BusConfig(replicas=3))
        await connection.close()
        for node in bus.nodes[1:]:
            await asyncio.to_thread(node.stop)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        kube = KubeApi(client, field_manager="e2e-test")
        try:
            async with (
                service("watcher", bus.url, kubeconfig, logs, env=replicated) as watcher,
                service("sandbox", bus.url, kubeconfig, logs, env=replicated) as worker,
            ):

                def waiting() -> bool:
                    return "provisioning the bus" in (logs / "sandbox.log").read_text()

                await until(waiting, within=60)
                await asyncio.sleep(3)
                assert worker.returncode is None, "it waits for JetStream instead of exiting"
                for node in bus.nodes[1:]:
                    await asyncio.to_thread(node.start)
                await kube.create(sandbox_body("after"))
                await until(lambda: ready(kube, ["after"]), within=90, interval=0.2)
                assert watcher.returncode is None and worker.returncode is None
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
